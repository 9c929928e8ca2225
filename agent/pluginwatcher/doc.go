// Package pluginwatcher discovers plugins the way kubelet's plugin manager
// does, and registers them in plugreg.
//
// A plugin creates a unix socket under the plugins directory (Config.Dir,
// kubelet's plugins_registry) and serves kubelet's registration API on it
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1). The watcher finds the
// socket (fsnotify, recursively, after an initial walk), asks GetInfo,
// validates the answer with the Handler of its type and registers the
// instance through the Registrar. Real kubelet plugins (the DRA
// kubelet-plugin helper, CSI node-driver-registrar) register unchanged.
// docs/kubelet.md describes the protocol, the state machine and where
// plugreg differs from kubelet.
//
// Whether the plugin is told (NotifyRegistrationStatus) depends on the
// dir's Mode. In a dir shared with kubelet (ModeShared; kubelet's own
// plugins_registry by default) kubelet answers its plugins and the watcher
// never does. In a dir plugreg owns (ModeOwned) the watcher tells a plugin
// "registered" once it is, and "not registered" only when the plugin
// itself is refused; a failure of plugreg's own (no leader, no server) is
// retried, never told: CSI's node-driver-registrar exits on "not
// registered" (kubernetes/kubernetes#69992).
//
// The package owns:
//
//   - the desired state of world (sockets seen, each with its creation
//     time and last GetInfo answer) and the actual state of world (what is
//     registered, per plugin name), both held by one loop goroutine;
//   - the reconciler in that loop, which starts one operation at a time per
//     socket (GetInfo) and per plugin name (Register, Deregister), so the
//     steps of one name never overlap; the newest live socket of a name is
//     the one registered;
//   - the retries (jittered exponential backoff, from GetInfo again) and the
//     probes (GetInfo every ProbeInterval; a plugin that stops answering is
//     deregistered, and registered again once it answers);
//   - the notices to the plugins, in an owned dir only (Mode);
//   - the registration's content: Type and Name from GetInfo, NodeID, a
//     stable AllocID (see AllocID), the endpoint, the versions and the
//     source marker (api.OptionSource = api.SourceKubelet) in Options.
//
// Caller's duties:
//
//  1. Make Dir before New (New refuses a missing or unreadable one) and
//     keep it: if Dir itself is removed the watcher sees nothing more.
//  2. Give a Registrar that is idempotent and safe for concurrent use by
//     different plugin names, and that honours ctx: Stop cancels it.
//  3. Call Start once, then Stop once done; Stop waits for every goroutine
//     and returns promptly even while plugins hang. Stop deregisters
//     nothing: what the host registered stays, for the agent to re-assert
//     (Plugins is that set) or for the cluster to reap with the node.
//  4. Treat the results of Plugins as yours: they are copies.
package pluginwatcher
