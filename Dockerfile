# Plexus's image for registry users: the same file tree `bash scripts/image.sh` builds on a machine without a registry
# (scripts/build-image.ts assembles it in both cases), on Node 20 and Debian bookworm's busybox.
#   docker build -t registry.example.com/plexus:0.1.0 . && docker push registry.example.com/plexus:0.1.0
# then set that image in deploy/40-daemonset.yaml (both containers) and drop imagePullPolicy: Never.
FROM node:20-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools make busybox-static && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build && node dist/scripts/build-image.js --rootfs /rootfs

FROM scratch
COPY --from=build /rootfs/ /
# Keep in step with IMAGE_CONFIG in scripts/build-image.ts.
ENV PATH=/usr/local/bin:/usr/bin:/bin NODE_OPTIONS=--max-semi-space-size=1
LABEL org.opencontainers.image.title=plexus
ENTRYPOINT ["/usr/local/bin/plexusd"]
