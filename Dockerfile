# tally-server on NVIDIA GPUs. No container engine runs on the project's
# machines, so the build stage runs exactly what CI runs: the README's
# scripts/install-deps.sh, then scripts/build.sh (cmake configure + build).
#   docker build -t tally:1.0.0 .
#   docker run --gpus all -p 50051:50051 -p 9464:9464 tally:1.0.0

# ---- build: CUDA toolkit + build dependencies ------------------------------
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# Hopper by default (CMakeLists.txt); another GPU generation:
#   docker build --build-arg CUDA_ARCHITECTURES=80 .
ARG CUDA_ARCHITECTURES=90
RUN scripts/build.sh -DTALLY_BUILD_TESTS=OFF -DTALLY_BUILD_BENCHMARKS=OFF \
      -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES} \
 && install -D -m 0755 build/server/tally-server /out/usr/local/bin/tally-server \
 && install -D -m 0755 build/client/tally /out/usr/local/bin/tally

# ---- runtime: CUDA runtime + the shared libraries tally links --------------
FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04 AS runtime
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN TALLY_RUNTIME_ONLY=1 /tmp/install-deps.sh \
 && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh
COPY --from=build /out/ /
# Fail the image build, not the pod, if a runtime library is missing.
RUN ! ldd /usr/local/bin/tally-server /usr/local/bin/tally | grep 'not found'
# Matches runAsUser in deploy/base/deployment.yaml.
RUN groupadd --system --gid 10001 tally \
 && useradd --system --uid 10001 --gid tally --no-create-home --shell /usr/sbin/nologin tally
USER 10001:10001
# Bounded allocator growth under many concurrent clients (docs/performance.md).
ENV MALLOC_ARENA_MAX=4
EXPOSE 50051 9464
# grpc.health.v1 over the serving port, via the tally CLI (Kubernetes uses its
# native gRPC probes instead; see deploy/).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["tally", "health", "--target=127.0.0.1:50051"]
ENTRYPOINT ["tally-server"]
CMD ["--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464"]
