# Levee's image: every command in cmd/ (verifier, gateway, budgetd, ...) and
# grpc-health-probe (for healthchecks), as static binaries in /usr/local/bin
# of an empty image. One image for all commands: they share most of their
# code (gRPC, the etcd client, Prometheus), so one build and one tag serve the
# whole fleet, and docker-compose.yml picks the command per service.
#
# No build stage: build the binaries on the host first (scripts/docker-up.sh
# does, into deploy/bin/image/, which .dockerignore lets through):
#
#   CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o deploy/bin/image/ ./cmd/...
#   CGO_ENABLED=0 GOBIN=$PWD/deploy/bin/image go install github.com/grpc-ecosystem/grpc-health-probe@v0.4.63
#   mkdir -p deploy/bin/certs-mount deploy/bin/scoped-mount/{etcd,budgetd,verifier,gateway,admin}
#   docker build -t levee/levee:dev .
#
# No CA certificates, time zone data or /etc/passwd: Levee trusts only the CA
# bundle it is given (-tls-dir, -tls-ca), logs in UTC and looks up no user
# names. No ENTRYPOINT, CMD or EXPOSE: each service names its command and
# ports. No shell either: run a command as `docker compose run --rm --no-deps
# budgetd1 budgetd status -addr budgetd1:7702`, not through sh.
FROM scratch
COPY deploy/bin/image/ /usr/local/bin/
# An empty /certs owned by the user below: a named volume mounted there is
# created with this owner, so the compose fleet's certs service (levee certs,
# as this user) can write its certificates, and keys of mode 0600 stay
# readable by every Levee service, which runs as the same user.
COPY --chown=65532:65532 deploy/bin/certs-mount/ /certs/
# /scoped/NAME, one per component, owned the same way: the certs service
# writes each component's identity alone into a volume mounted there.
COPY --chown=65532:65532 deploy/bin/scoped-mount/ /scoped/
ENV PATH=/usr/local/bin
# Nothing is written to disk with an external etcd; budgetd's embedded etcd
# (no -etcd) would need a writable volume for -data-dir.
USER 65532:65532
LABEL org.opencontainers.image.title="levee" \
      org.opencontainers.image.description="Levee gRPC password-verification fleet: verifier, gateway, budgetd"
