# Build: compile TypeScript with swc, then keep production dependencies only.
# Node 24 is the active LTS; every dependency's engines include it (and Node 20.19+, which CI tests).
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY .swcrc tsconfig.json ./
COPY src ./src
COPY migrations ./migrations
COPY clients/typescript ./clients/typescript
RUN npm run build && npm prune --omit=dev

# Runtime: no dev tooling, non-root, health-checked.
FROM node:24-bookworm-slim
ENV NODE_ENV=production PORT=3000 HOST=0.0.0.0
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY config ./config
USER node
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/health/live').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
CMD ["node", "--enable-source-maps", "--import", "./dist/src/telemetry/register.js", "dist/src/main.js"]
