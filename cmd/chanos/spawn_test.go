package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chanos/chanos/internal/testkit"
)

// --ship names the shared libraries a program needs beyond the C
// library's, which the target must hold: none for a program that needs
// only libc, or for a file that is not ELF; OpenSSL's for the C ship
// example, which links it.
func TestSharedLibraries(t *testing.T) {
	if libs := sharedLibraries("/bin/true"); len(libs) != 0 {
		t.Errorf("/bin/true needs %v beyond the C library, want none", libs)
	}
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if libs := sharedLibraries(script); libs != nil {
		t.Errorf("a script needs %v, want none", libs)
	}
	if needs := shipNeeds("/bin/true"); needs != nil {
		t.Errorf("/bin/true needs %v shipped, want nothing", needs)
	}
	prog := filepath.Join(testkit.CBuild(t, "examples/ship_test"), "examples/ship_test")
	libs := sharedLibraries(prog)
	for _, want := range []string{"libssl.so.3", "libcrypto.so.3"} {
		if !slices.Contains(libs, want) {
			t.Errorf("ship_test needs %v, want %s among them", libs, want)
		}
	}
	if slices.ContainsFunc(libs, systemLibrary) {
		t.Errorf("ship_test needs %v: the C library's own are left out", libs)
	}
}

func TestSystemLibrary(t *testing.T) {
	for lib, want := range map[string]bool{
		"libc.so.6": true, "libm.so.6": true, "libpthread.so.0": true, "ld-linux-x86-64.so.2": true,
		"libssl.so.3": false, "libstdc++.so.6": false, "libchanos.so": false, "libcrypto.so.3": false,
	} {
		if got := systemLibrary(lib); got != want {
			t.Errorf("systemLibrary(%q) = %v, want %v", lib, got, want)
		}
	}
}

// A script shipped needs its interpreter there, and the program that env
// is to find.
func TestShipNeedsInterpreter(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct {
		head string
		want []string
	}{
		{"#!/bin/sh\necho hi\n", []string{"/bin/sh"}},
		{"#! /usr/bin/python3 -u\n", []string{"/usr/bin/python3"}},
		{"#!/usr/bin/env python3\nprint(1)\n", []string{"/usr/bin/env", "python3"}},
		{"#!/usr/bin/env -S python3 -u\n", []string{"/usr/bin/env"}},
		{"#!\n", nil},
		{"plain text\n", nil},
	} {
		path := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(path, []byte(c.head), 0o700); err != nil {
			t.Fatal(err)
		}
		if got := shipNeeds(path); !slices.Equal(got, c.want) {
			t.Errorf("%q needs %q, want %q", c.head, got, c.want)
		}
	}
}
