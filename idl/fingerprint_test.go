package idl

import "testing"

// What changes the fingerprint and what does not (docs/idl.md,
// "Fingerprints").
func TestFingerprint(t *testing.T) {
	base := `interface calc "Sums" {
		typedef struct { int64 delta; uint32 n; } step;
		rpc add(in int64 delta, out int64 sum);
		message tick(step s, uint8 data[len, 16]);
	};`
	fp := func(src string) uint64 {
		t.Helper()
		iface, err := compile(t, "calc.if", src)
		if err != nil {
			t.Fatal(err)
		}
		return iface.Fingerprint()
	}
	want := fp(base)
	same := map[string]string{
		"comments and whitespace": `/* calc */ interface calc "Sums" {
			// a step
			typedef struct { int64   delta; uint32 n; } step;

			rpc add(in int64 delta,
			        out int64 sum); // adds
			message tick(step s, uint8 data[len, 16]);
		};`,
		"doc comments everywhere": `// calc doc
		interface calc "Sums" {
			/* step doc */
			typedef struct {
				// delta doc
				int64 delta;
				/** n doc */
				uint32 n;
			} step;
			// add doc
			rpc add(
				// delta doc
				in int64 delta,
				// sum doc
				out int64 sum);
			// tick doc
			message tick(
				// s doc
				step s,
				// data doc
				uint8 data[len, 16]);
		};`,
		"description": `interface calc "Other words" {
			typedef struct { int64 delta; uint32 n; } step;
			rpc add(in int64 delta, out int64 sum);
			message tick(step s, uint8 data[len, 16]);
		};`,
		"a type's name": `interface calc "Sums" {
			alias wide int64;
			typedef struct { wide delta; uint32 n; } stride;
			rpc add(in wide delta, out int64 sum);
			message tick(stride s, uint8 data[len, 16]);
		};`,
		"a dynamic array's length name": `interface calc "Sums" {
			typedef struct { int64 delta; uint32 n; } step;
			rpc add(in int64 delta, out int64 sum);
			message tick(step s, uint8 data[count, 16]);
		};`,
	}
	for what, src := range same {
		if got := fp(src); got != want {
			t.Errorf("%s changed the fingerprint: %016x, want %016x", what, got, want)
		}
	}
	differ := map[string]string{
		"an argument's type": `interface calc "Sums" {
			typedef struct { int64 delta; uint32 n; } step;
			rpc add(in int32 delta, out int64 sum);
			message tick(step s, uint8 data[len, 16]);
		};`,
		"a struct field's type": `interface calc "Sums" {
			typedef struct { int32 delta; uint32 n; } step;
			rpc add(in int64 delta, out int64 sum);
			message tick(step s, uint8 data[len, 16]);
		};`,
		"a bound": `interface calc "Sums" {
			typedef struct { int64 delta; uint32 n; } step;
			rpc add(in int64 delta, out int64 sum);
			message tick(step s, uint8 data[len, 17]);
		};`,
		"the messages' order": `interface calc "Sums" {
			typedef struct { int64 delta; uint32 n; } step;
			message tick(step s, uint8 data[len, 16]);
			rpc add(in int64 delta, out int64 sum);
		};`,
		"a new message at the end": `interface calc "Sums" {
			typedef struct { int64 delta; uint32 n; } step;
			rpc add(in int64 delta, out int64 sum);
			message tick(step s, uint8 data[len, 16]);
			message reset();
		};`,
		"an argument's name": `interface calc "Sums" {
			typedef struct { int64 delta; uint32 n; } step;
			rpc add(in int64 d, out int64 sum);
			message tick(step s, uint8 data[len, 16]);
		};`,
	}
	for what, src := range differ {
		if got := fp(src); got == want {
			t.Errorf("%s kept the fingerprint %016x", what, got)
		}
	}
}
