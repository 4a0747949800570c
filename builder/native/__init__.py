"""Native truth: ELF files, glibc's loader emulated, process maps, the live audit, kernel sets
and the dispatch of code by host capability."""
