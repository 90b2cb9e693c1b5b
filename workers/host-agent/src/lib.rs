//! gpumarket-host-agent
