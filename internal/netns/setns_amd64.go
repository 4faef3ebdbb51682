package netns

// sysSetns is setns(2)'s number, which package syscall lacks on amd64.
const sysSetns = 308
