# syntax=docker/dockerfile:1
# Multi-stage build of infergate: a locked, release build in the Rust image,
# then only the binary on a distroless (glibc, no shell, no package manager)
# base running as the non-root user 65532. The cc image carries the CA roots
# used to verify public serving-graph URLs.

FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
# Every file cargo's manifest names (benches, examples, tests) must be present.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
COPY benches ./benches
COPY hack ./hack
COPY tests ./tests
COPY crds ./crds
RUN cargo build --release --locked --bin infergate \
 && install -D -m 0755 target/release/infergate /out/infergate

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/infergate /usr/local/bin/infergate
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/infergate"]
CMD ["serve", "--self-signed"]
