package pluginpb

import (
	"fmt"

	"github.com/plugreg/plugreg/api"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// DecodePlugin decodes a registration body sent as protobuf
// (api.PluginProtobuf): one PluginInfo, with no field this binary does not
// know at any depth, as a JSON body may have none (a client that sets a
// field the server would drop learns it at once). It does not validate.
func DecodePlugin(b []byte) (*api.PluginInfo, error) {
	var p PluginInfo
	if err := p.UnmarshalVT(b); err != nil {
		return nil, err
	}
	if where := unknownField(p.ProtoReflect()); where != "" {
		return nil, fmt.Errorf("a field this server does not know, in %s", where)
	}
	return p.API(), nil
}

// unknownField names the message under m (m itself included) that holds
// fields its descriptor does not know, "" when none does.
func unknownField(m protoreflect.Message) string {
	if len(m.GetUnknown()) > 0 {
		return string(m.Descriptor().FullName())
	}
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil || fd.IsMap(): // PluginInfo's one map holds strings
		case fd.IsList():
			for i := 0; i < v.List().Len() && found == ""; i++ {
				found = unknownField(v.List().Get(i).Message())
			}
		default:
			found = unknownField(v.Message())
		}
		return found == ""
	})
	return found
}
