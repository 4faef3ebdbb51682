package idl

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzCompile feeds arbitrary bytes to the whole front end: it must answer
// with an interface, whose doc comments keep their promises (checkDoc), or
// an ErrorList, never a panic or a hang.
func FuzzCompile(f *testing.F) {
	f.Add([]byte(everything))
	seeds, _ := filepath.Glob("../interfaces/*.if")
	more, _ := filepath.Glob("../testdata/wire/*.if")
	for _, p := range append(seeds, more...) {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("interface t { typedef a b; typedef b a; message m(a x); };"))
	f.Add([]byte("interface t { @x(a=1) rpc r(in String s[4], out uint8 d[n, 2]); };"))
	f.Add([]byte("/** d\xff\x01 */\ninterface t {\n\t// a\r\n\t// */ b\n\tmessage m(\n\t\t/* c /* d */ */ uint8 x); // e\n};"))
	f.Fuzz(func(t *testing.T, src []byte) {
		iface, err := Compile(Source{Name: "t.if", Data: src}, nil, Options{AllowNameMismatch: true})
		if err == nil {
			checkDocs(t, iface)
			_ = iface.MaxFrameSize()
			for _, d := range iface.Types {
				d.FixedSize()
			}
			return
		}
		if _, ok := err.(ErrorList); !ok {
			t.Fatalf("error of type %T: %v", err, err)
		}
	})
}
