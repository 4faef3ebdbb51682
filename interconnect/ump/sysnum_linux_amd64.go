package ump

const (
	sysMemfdCreate = 319
	sysEventfd2    = 290
	sysMembarrier  = 324
)
