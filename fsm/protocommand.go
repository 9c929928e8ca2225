package fsm

import (
	"fmt"
	"maps"
	"slices"

	"github.com/plugreg/plugreg/api"
	"github.com/plugreg/plugreg/api/pluginpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// The two writes clients send most, registration and deregistration, have
// a second, protobuf form in the log. Decoding a msgpack command was the
// largest single cost of applying one (go-msgpack's reflection: about 7 %
// of a server's CPU at 64 writers, on each of three servers); the protobuf
// form decodes with generated code (pluginpb's vtprotobuf UnmarshalVT) at
// a fraction of it. Each is a new command type, not a new encoding of the
// old ones: a binary that does not know it refuses it (and stops applying)
// rather than misreading it, so a server writes them only once every
// server of the configuration knows them (cluster's rpcVersionProtoCommands).
//
// Their bodies are protobuf messages, written with protowire rather than
// generated (two small envelopes around pluginpb.PluginInfo):
//
//	message RegisterEntry {
//	  pluginpb.PluginInfo plugin = 1;
//	  string request_id = 2;
//	}
//	message DeregisterEntry {
//	  string type = 1;
//	  string name = 2;
//	  string alloc_id = 3;
//	  string request_id = 4;
//	  // A condition (ConditionalDeregisterRequest) when either is set.
//	  string if_node_id = 5;
//	  uint64 if_modify_index = 6;
//	}
//
// ConditionalRegisterCommand's body is a RegisterEntry with one more
// field (condregister.go).
//
// As in the msgpack form, fields this binary does not know are skipped (a
// newer binary may add some), and what is decoded is validated.
const (
	RegisterProtoCommand   CommandType = 11
	DeregisterProtoCommand CommandType = 12
)

// Encoding is the body encoding of a log entry.
type Encoding uint8

const (
	// Msgpack is every command's first encoding, and the only one of
	// most.
	Msgpack Encoding = iota
	// Protobuf is the encoding of RegisterProtoCommand,
	// DeregisterProtoCommand, and of ConditionalRegisterCommand and
	// HostSyncCommand (which have no other).
	Protobuf
)

// encodingOf is the encoding of an entry of type t.
func encodingOf(t CommandType) Encoding {
	switch t {
	case RegisterProtoCommand, DeregisterProtoCommand, ConditionalRegisterCommand, HostSyncCommand:
		return Protobuf
	}
	return Msgpack
}

// EncodeCommandIn validates req and encodes it as a log entry in enc: in
// protobuf when enc is Protobuf and req has a protobuf form (a
// registration or a deregistration), in msgpack otherwise.
func EncodeCommandIn(req Request, enc Encoding) ([]byte, error) {
	var encode func() []byte
	switch r := req.(type) {
	case *RegisterRequest:
		encode = func() []byte { return encodeRegisterProto(r) }
	case *DeregisterRequest:
		encode = func() []byte {
			return encodeDeregisterProto(&ConditionalDeregisterRequest{Type: r.Type, Name: r.Name, AllocID: r.AllocID, RequestID: r.RequestID})
		}
	case *ConditionalDeregisterRequest:
		encode = func() []byte { return encodeDeregisterProto(r) }
	case *ConditionalRegisterRequest:
		encode = func() []byte {
			return appendRegisterProto(ConditionalRegisterCommand, r.Plugin, r.RequestID, r.IfNodeID)
		}
	case *HostSyncRequest:
		encode = func() []byte { return encodeHostSyncProto(r) }
	}
	if enc != Protobuf || encode == nil {
		return EncodeCommand(req)
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", req.CommandType(), err)
	}
	if err := validateNew(req); err != nil {
		return nil, fmt.Errorf("encode %s: %w", req.CommandType(), err)
	}
	return encode(), nil
}

func encodeRegisterProto(r *RegisterRequest) []byte {
	return appendRegisterProto(RegisterProtoCommand, r.Plugin, r.RequestID, "")
}

// appendRegisterProto encodes a registration entry of type t
// (RegisterProtoCommand, or ConditionalRegisterCommand with ifNodeID).
func appendRegisterProto(t CommandType, plugin *api.PluginInfo, requestID, ifNodeID string) []byte {
	b := appendPluginField([]byte{byte(t)}, 1, plugin,
		protowire.SizeTag(2)+protowire.SizeBytes(len(requestID))+protowire.SizeTag(3)+protowire.SizeBytes(len(ifNodeID)))
	if requestID != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, requestID)
	}
	if ifNodeID != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, ifNodeID)
	}
	return b
}

// appendPluginField appends plugin to b as field num, a
// pluginpb.PluginInfo, with room for reserve more bytes after it (one
// allocation for a whole entry).
func appendPluginField(b []byte, num protowire.Number, plugin *api.PluginInfo, reserve int) []byte {
	p := pluginpb.FromPlugin(plugin)
	// The options go last, in key order (vtprotobuf writes a map in Go's
	// random order): equal requests encode to equal bytes, as msgpack's
	// canonical form does. A field's place in a message is free in
	// protobuf.
	options := p.Options
	p.Options = nil
	var tail []byte
	for _, k := range slices.Sorted(maps.Keys(options)) {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, k)
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, options[k])
		tail = protowire.AppendTag(tail, pluginOptionsField, protowire.BytesType)
		tail = protowire.AppendBytes(tail, entry)
	}
	head := p.SizeVT()
	size := head + len(tail)
	b = slices.Grow(b, protowire.SizeTag(num)+protowire.SizeVarint(uint64(size))+size+reserve)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = append(b, make([]byte, head)...)
	// MarshalToSizedBufferVT fills exactly the last head bytes; it cannot
	// fail on a message it has just sized.
	if _, err := p.MarshalToSizedBufferVT(b[len(b)-head:]); err != nil {
		panic(fmt.Sprintf("fsm: marshal a sized PluginInfo: %v", err))
	}
	return append(b, tail...)
}

// pluginOptionsField is pluginpb.PluginInfo's options field (map entries
// are messages of key = 1, value = 2).
const pluginOptionsField = 7

func encodeDeregisterProto(r *ConditionalDeregisterRequest) []byte {
	b := make([]byte, 0, 16+len(r.Type)+len(r.Name)+len(r.AllocID)+len(r.RequestID)+len(r.IfNodeID))
	b = append(b, byte(DeregisterProtoCommand))
	for _, f := range []struct {
		num protowire.Number
		s   string
	}{{1, r.Type}, {2, r.Name}, {3, r.AllocID}, {4, r.RequestID}, {5, r.IfNodeID}} {
		if f.s != "" {
			b = protowire.AppendTag(b, f.num, protowire.BytesType)
			b = protowire.AppendString(b, f.s)
		}
	}
	if r.IfModifyIndex != 0 {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, r.IfModifyIndex)
	}
	return b
}

// The fields of the two envelopes by number, with their wire types
// (allocated once: every server decodes every entry).
var (
	registerFields = map[protowire.Number]protowire.Type{1: protowire.BytesType, 2: protowire.BytesType}
	// A RegisterEntry's field 3 stays unknown (skipped, whatever its wire
	// type), as it was before ConditionalRegisterEntry gave it a meaning.
	conditionalRegisterFields = map[protowire.Number]protowire.Type{1: protowire.BytesType, 2: protowire.BytesType, 3: protowire.BytesType}
	deregisterFields          = map[protowire.Number]protowire.Type{
		1: protowire.BytesType, 2: protowire.BytesType, 3: protowire.BytesType,
		4: protowire.BytesType, 5: protowire.BytesType, 6: protowire.VarintType,
	}
)

// decodeProto decodes the body of a protobuf entry of type t (not yet
// validated: DecodeCommand does that for every encoding).
func decodeProto(t CommandType, body []byte) (Request, error) {
	switch t {
	case RegisterProtoCommand:
		p, requestID, _, err := decodeRegisterProto(body, registerFields)
		if err != nil {
			return nil, err
		}
		return &RegisterRequest{Plugin: p, RequestID: requestID}, nil
	case ConditionalRegisterCommand:
		p, requestID, ifNodeID, err := decodeRegisterProto(body, conditionalRegisterFields)
		if err != nil {
			return nil, err
		}
		return &ConditionalRegisterRequest{Plugin: p, IfNodeID: ifNodeID, RequestID: requestID}, nil
	case HostSyncCommand:
		return decodeHostSyncProto(body)
	case DeregisterProtoCommand:
		var r ConditionalDeregisterRequest
		err := eachField(body, func(num protowire.Number, v []byte, n uint64) {
			switch num {
			case 1:
				r.Type = string(v)
			case 2:
				r.Name = string(v)
			case 3:
				r.AllocID = string(v)
			case 4:
				r.RequestID = string(v)
			case 5:
				r.IfNodeID = string(v)
			case 6:
				r.IfModifyIndex = n
			}
		}, deregisterFields)
		if err != nil {
			return nil, err
		}
		if r.IfNodeID == "" && r.IfModifyIndex == 0 {
			return &DeregisterRequest{Type: r.Type, Name: r.Name, AllocID: r.AllocID, RequestID: r.RequestID}, nil
		}
		return &r, nil
	}
	return nil, fmt.Errorf("%w: %d", api.ErrUnknownCommand, uint8(t))
}

// decodeRegisterProto decodes a RegisterEntry or a
// ConditionalRegisterEntry, whose fields are known.
func decodeRegisterProto(body []byte, known map[protowire.Number]protowire.Type) (p *api.PluginInfo, requestID, ifNodeID string, err error) {
	var plugin []byte
	err = eachField(body, func(num protowire.Number, v []byte, _ uint64) {
		switch num {
		case 1:
			plugin = v
		case 2:
			requestID = string(v)
		case 3:
			ifNodeID = string(v)
		}
	}, known)
	if err != nil {
		return nil, "", "", err
	}
	if plugin == nil {
		return nil, "", "", fmt.Errorf("no plugin")
	}
	p, err = decodePluginProto(plugin)
	return p, requestID, ifNodeID, err
}

// decodePluginProto decodes a pluginpb.PluginInfo.
func decodePluginProto(b []byte) (*api.PluginInfo, error) {
	var pb pluginpb.PluginInfo
	if err := pb.UnmarshalVT(b); err != nil {
		return nil, fmt.Errorf("plugin: %w", err)
	}
	return pb.API(), nil
}

// eachField calls fn with every field of a protobuf message body whose
// number is in known (its bytes for a length-delimited field, its value
// for a varint), skipping the others; a known field of another wire type,
// or a body that does not parse, is an error. A field that occurs twice is
// passed twice (protobuf's rule: the last one wins).
func eachField(b []byte, fn func(num protowire.Number, v []byte, n uint64), known map[protowire.Number]protowire.Type) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		want, ok := known[num]
		if !ok {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		if typ != want {
			return fmt.Errorf("field %d: wire type %d, want %d", num, typ, want)
		}
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			if v == nil {
				v = []byte{} // present, if empty
			}
			fn(num, v, 0)
			b = b[n:]
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			fn(num, nil, v)
			b = b[n:]
		}
	}
	return nil
}
