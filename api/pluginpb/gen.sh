#!/bin/sh
# Regenerates plugin.pb.go and plugin_grpc.pb.go from plugin.proto with
# pinned generators. Needs protoc (Debian: apt-get install protobuf-compiler;
# the committed files were made with libprotoc 3.21.12).
# Run from anywhere: go generate ./api/pluginpb
set -eu
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PATH=$bin:$PATH protoc --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative plugin.proto
