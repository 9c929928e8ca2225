// Package pluginpb is the plugin socket's messages and the HTTP API's
// protobuf bodies (plugin.proto) and their generated Go code: the agent
// side (agent/pluginsock), the SDK (stub) and the Go client (client) use
// them. The gRPC service that carries them is package pluginrpc, so that
// importing this package does not link gRPC. Regenerate both with
// `go generate ./api/pluginpb`.
package pluginpb

//go:generate ./gen.sh
