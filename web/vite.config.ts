/// <reference types="vitest/config" />
import { defineConfig } from "vite";
import preact from "@preact/preset-vite";
import { writeFileSync } from "node:fs";

// dist/.keep is committed so that the Go package embeds dist/ in a tree
// where the console was never built; a build keeps it.
const keep = { name: "capstan-keep", closeBundle: () => writeFileSync("dist/.keep", "") };

// The console is served by the control plane from its own origin; in
// development `npm run dev` proxies the API to a running control plane.
export default defineConfig({
  plugins: [preact(), keep],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "assets",
    // The strict Content-Security-Policy forbids inline scripts and data:
    // scripts: no asset is inlined into the page.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
  },
  server: {
    proxy: {
      "/api": { target: process.env.CAPSTAN_URL ?? "http://127.0.0.1:8080", changeOrigin: false },
    },
  },
  test: {
    environment: "node",
    include: ["src/**/*.test.ts"],
  },
});
