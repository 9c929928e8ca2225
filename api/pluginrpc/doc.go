// Package pluginrpc is the plugin socket's gRPC service (Plugins.Session),
// generated from plugin_service.proto; its messages are package pluginpb's.
// The agent (agent/pluginsock) serves it and the SDK (stub) calls it. It
// is apart from pluginpb so that a program that only decodes messages,
// such as the Go client reading the protobuf event stream, does not link
// gRPC. Regenerate with `go generate ./api/pluginpb`.
package pluginrpc
