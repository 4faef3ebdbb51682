// Package engine is the connection engine: one implementation of what a
// connection does over any interconnect's Link. It matches replies to
// calls, carries deadlines and cancels, serves calls inline or
// concurrently, holds what one reader passes over for another, and ends
// the connection with the reason its link gave.
//
// Every connection of chanos runs on it: the typed connections of
// generated code, and a domain's session with its monitor. Users reach it
// through package chanos (its Conn is this Conn with the user's methods);
// generated code through package chanos/genrt, which also gives it the
// fast paths here that take frames on the caller's stack.
package engine
