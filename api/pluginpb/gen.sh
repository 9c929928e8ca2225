#!/bin/sh
# Regenerates plugin.pb.go and plugin_vtproto.pb.go (generated code without
# reflection: the Go client decodes its event stream with it, servers the
# protobuf registration body and log entry) from plugin.proto, and the
# plugin socket's gRPC service, ../pluginrpc/plugin_service.pb.go and
# plugin_service_grpc.pb.go, from ../pluginrpc/plugin_service.proto, with
# pinned generators. The service has a package of its own so that a program
# that only decodes messages (the Go client) does not link gRPC.
# Needs protoc (Debian: apt-get install protobuf-compiler;
# the committed files were made with libprotoc 3.21.12).
# Run from anywhere: go generate ./api/pluginpb
set -eu
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
# The same version as the vtprotobuf runtime in go.mod.
GOBIN=$bin go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.1-0.20240319094008-0393e58bdf10
PATH=$bin:$PATH protoc --go_out=. --go_opt=paths=source_relative \
	--go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size plugin.proto
PATH=$bin:$PATH protoc -I . -I ../pluginrpc --go_out=../pluginrpc --go_opt=paths=source_relative \
	--go-grpc_out=../pluginrpc --go-grpc_opt=paths=source_relative ../pluginrpc/plugin_service.proto
