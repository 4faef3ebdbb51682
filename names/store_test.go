package names_test

import (
	"testing"

	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/names/storetest"
)

// TestMemoryStore runs the behaviour every store shares against Memory.
func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return names.NewMemory() })
}
