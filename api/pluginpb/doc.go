// Package pluginpb is the plugin socket's protocol (plugin.proto) and its
// generated Go code: the agent side (agent/pluginsock) and the SDK (stub)
// both speak it. Regenerate with `go generate ./api/pluginpb`.
package pluginpb

//go:generate ./gen.sh
