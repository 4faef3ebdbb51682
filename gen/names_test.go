package gen

import (
	"testing"

	"github.com/chanos/chanos/idl"
)

func TestTypeNames(t *testing.T) {
	iface, err := idl.Compile(idl.Source{Name: "t.if", Data: []byte(`interface t {
		typedef struct { uint32 x; } trigger;    // message trigger
		typedef uint8 trigger_t;                 // so trigger becomes trigger_t_t
		typedef enum { a, b } Ping;              // message ping, in another case
		typedef uint16 get_call;                 // rpc get's call
		typedef uint16 getReply;                 // rpc get's reply, camelCase
		typedef uint32 other;                    // claimed by nothing
		message trigger(trigger t, trigger_t u);
		message ping(Ping p);
		rpc get(in get_call c, out getReply r, out other o);
	};`)}, nil, idl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	names := TypeNames(iface)
	want := []string{"trigger_t_t", "trigger_t", "Ping_t", "get_call_t", "getReply_t", "other"}
	for i, d := range iface.Types {
		if names[d] != want[i] {
			t.Errorf("type %s is named %q, want %q", d.Name, names[d], want[i])
		}
	}
}
