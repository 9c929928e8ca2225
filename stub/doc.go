// Package stub is the plugin-side SDK, after containerd NRI's stub: a
// plugin process links it, connects to its host's plugreg agent over the
// agent's plugin socket, registers itself, and receives the registry events
// it asked for.
//
//	s, err := stub.New(plugin, stub.WithPluginType("demo"), stub.WithEndpoint("/run/demo.sock"))
//	if err != nil { ... }
//	err = s.Run(ctx) // registered until ctx ends or Stop; then deregistered
//
// The plugin value implements any of ConfigureInterface,
// RegisteredInterface, UpdatedInterface, DeregisteredInterface,
// ResetInterface and ShutdownInterface; the event mask is derived from
// the ones it implements unless WithEventMask or Configure says otherwise.
//
// Where it differs from NRI's stub, on purpose (NRI users' complaints,
// containerd/nri issues 74, 90, 108, 114, 129, 173):
//
//   - It reconnects, with backoff, for as long as it runs: when the agent
//     restarts or the connection is cut, it registers again with its
//     session token (the agent keeps the registration for its grace
//     period, so nothing is deregistered) and resumes its events from the
//     last one it delivered, with no gap and no duplicate.
//   - It never exits the process; every failure is an error returned to
//     the caller (Start, Run) or logged.
//   - A handler that is slow or panics affects only its own plugin: the
//     panic is recovered and logged, and a slow handler only holds back
//     this plugin's own events (the agent and other plugins never wait).
//   - How long it waits for the agent is the plugin's to say
//     (WithRegistrationTimeout; NRI's stub waits a fixed 5s), and a plugin
//     started before its agent can wait for the agent's socket to appear
//     (WithWaitForSocket) instead of failing (containerd/nri#292: a plugin
//     lost the race with a slow runtime at boot). The plugin's timeout
//     bounds its own wait; the agent's, sent in Configure, bounds the
//     agent's wait for the plugin; without WithRegistrationTimeout the
//     stub waits the agent's registration and request timeouts together
//     (15s until the agent said), since the agent answers only once its
//     registry write is done or its request timeout passed.
//
// The package depends on api, api/pluginpb, api/pluginrpc and gRPC only:
// never on raft or the server (agent.TestHostSideDoesNotImportTheServer
// checks), nor on anything else of plugreg
// (agent.TestStubImportsOnlyTheProtocol). That is why the wait for the
// socket polls instead of watching the directory.
package stub
