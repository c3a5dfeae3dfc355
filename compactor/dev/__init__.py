"""What development runs use: the local broker, the demo, a local Spark cluster."""

# JIT settings for JVMs that live minutes (the test suite's Spark sessions and the jobs its e2e
# tests start, the benchmarks' --quick runs), where a job lives for months and keeps Java's
# defaults. On two cores those runs are CPU-bound: C1 alone compiles what they run for about
# two-thirds of the CPU (12 e2e tests: 800 -> 523 CPU-s), and a code cache larger than C1's
# 48 MiB default keeps a long session from filling it (full, its sweeper took 3 of 15 CPU-minutes).
SHORT_RUN_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"
