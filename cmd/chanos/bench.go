package main

import (
	"context"
	"fmt"
)

// runBench is replaced by the benchmark suites (issue 3 onwards).
func runBench(ctx context.Context, args []string) error {
	_ = ctx
	return fmt.Errorf("%w: no benchmark suites yet (%v)", errUsage, args)
}
