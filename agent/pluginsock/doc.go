// Package pluginsock is the agent side of the plugin SDK (package stub):
// every agent listens on a unix socket (-plugin-socket, mode 0660) for
// gRPC sessions (api/pluginpb), one per plugin, and keeps each plugin
// registered for its host while its session lives.
//
// Lifecycle of one plugin, identified on its host by (type, name, idx):
//
//   - Register -> Configure -> Subscribe: the agent registers it (through
//     the host's anti-entropy, agent.Host, so a write that fails is made
//     later) and answers Ready; then it streams the events the plugin's
//     mask asked for, with heartbeats, from the node's event stream.
//   - Stop: deregistered at once; the agent ends the stream with OK.
//   - The session ends otherwise (process killed, connection cut, stalled
//     keepalive): the registration is kept for Grace. A session that
//     registers the same plugin within Grace takes it over (with the old
//     session's token, even while the agent still thinks the old
//     connection alive; without it, once the old connection is gone):
//     nothing is written unless the registration changed, so a plugin
//     that restarted quickly causes no event at all. After Grace the
//     plugin is deregistered.
//   - The agent stops: sessions are told (Shutdown) and closed; nothing is
//     deregistered. Registrations stay for the agent to re-assert when its
//     plugins reconnect after its restart, and anti-entropy removes those
//     that did not come back within the return window of the start: Grace,
//     but at least the stub's longest reconnect backoff and a handshake,
//     so that a plugin still retrying is not taken for gone (or the leader
//     reaps the node if the agent does not come back).
package pluginsock
