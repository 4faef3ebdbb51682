package idl_test

import (
	"fmt"

	"github.com/chanos/chanos/idl"
)

func ExampleCompile() {
	src := `interface kv {
    rpc get(in String key[256], out uint8 value[value_len, 65536]);
};`
	iface, err := idl.Compile(idl.Source{Name: "kv.if", Data: []byte(src)}, nil, idl.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	m := iface.Messages[0]
	fmt.Println(iface.Name, m.Name, m.Number, len(m.In()), len(m.Out()), iface.MaxFrameSize())

	_, err = idl.Compile(idl.Source{Name: "kv.if", Data: []byte(`interface kv { message m(String s); };`)}, nil, idl.Options{})
	fmt.Println(err)
	// Output:
	// kv get 1 1 1 65556
	// kv.if:1:33: String argument s needs a bound: String s[MAX]
}
