# Build: compile TypeScript with swc, then keep production dependencies only.
# Node 24 is the active LTS; every dependency's engines include it (and Node 20.19+, which CI tests).
FROM node:24-bookworm-slim AS build
WORKDIR /app
# Scarf (swagger-ui-dist's install-time telemetry) is off: package.json's allowScripts denies its script too.
ENV SCARF_ANALYTICS=false
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY .swcrc tsconfig.json ./
COPY src ./src
COPY migrations ./migrations
COPY clients/typescript ./clients/typescript
# The production dependencies only: no embedded PostgreSQL (a development dependency; the image needs DATABASE_URL).
RUN npm run build && npm prune --omit=dev

# Runtime: no dev tooling, non-root, health-checked.
FROM node:24-bookworm-slim
ENV NODE_ENV=production PORT=3000 HOST=0.0.0.0
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY package.json ./
COPY config ./config
USER node
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/health/live').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
# The CLIs run the built code and never build: node bin/onejob.js apikey|migrate|certify ... (docs/operations.md#api-keys).
CMD ["node", "--enable-source-maps", "--import", "./dist/src/telemetry/register.js", "dist/src/main.js"]
