//go:build !amd64 && !arm64

package netns

// sysSetns is unknown here: Machine.Do fails, and Command still works.
const sysSetns = -1
