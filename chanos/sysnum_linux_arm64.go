package chanos

// sysPreadv2 is preadv2(2)'s number, which package syscall lacks.
const sysPreadv2 = 286
