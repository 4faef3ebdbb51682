package netns

import "syscall"

// sysSetns is setns(2)'s number.
const sysSetns = syscall.SYS_SETNS
