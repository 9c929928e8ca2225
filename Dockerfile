# plugreg's container image: the static binary on distroless, as the
# chart (deploy/helm/plugreg) runs it. Build anywhere:
#   docker build -t plugreg .      (or: podman build -t plugreg .)
# The image runs as a non-root user, writes only to its data volume
# (/data) and reads SIGTERM as on systemd (a graceful stop).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/plugreg ./cmd/plugreg

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/plugreg /usr/local/bin/plugreg
USER 65532:65532
VOLUME ["/data"]
EXPOSE 7700 7300 7301 7301/udp
ENTRYPOINT ["/usr/local/bin/plugreg"]
CMD ["agent", "-data-dir", "/data"]
