module github.com/plugreg/plugreg/compat/kubernetes

go 1.26.8

require (
	github.com/plugreg/plugreg v0.0.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	go.yaml.in/yaml/v2 v2.4.5 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/plugreg/plugreg => ../..
