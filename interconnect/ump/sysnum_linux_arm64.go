package ump

const (
	sysMemfdCreate = 279
	sysEventfd2    = 19
)
