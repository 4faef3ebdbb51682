package ump

const (
	sysMemfdCreate = 279
	sysEventfd2    = 19
	sysMembarrier  = 283
)
