"""The runtime model of SGLang (0.5.23): flags and defaults, KV region geometry, the
transfer plan, and a loader that runs the installed SGLang's own decision code."""
