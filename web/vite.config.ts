import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// One app served by the gateway at /portal and /billing. Assets are built
// under /portal/; the gateway serves the build's files under both routes.
export default defineConfig({
  base: '/portal/',
  plugins: [react()],
  build: { outDir: 'dist', emptyOutDir: true },
  server: {
    // `npm run dev`: the API of a local `make run`.
    proxy: { '/graphql': process.env.GPUMARKET_GATEWAY_URL ?? 'http://127.0.0.1:8080' },
  },
});
