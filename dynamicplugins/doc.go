// Package dynamicplugins is the Registry interface of Nomad's
// dynamicplugins (RegisterPlugin, DeregisterPlugin, ListPlugins,
// DispensePlugin, PluginForAlloc, PluginsUpdatedCh, StubDispenserForType,
// Shutdown), as plugreg honours it, and Local, a single-process Registry:
// an FSM applied in this process with its own watch hub, Nomad's
// client-local registry. Tests of the agent's parts use Local as the real
// registry code behind them.
//
// A cluster does not go through this package: its servers write through
// Raft (package cluster) and serve the same state over HTTP and RPC.
package dynamicplugins
