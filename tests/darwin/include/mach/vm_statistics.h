/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  The tag an anonymous mmap passes as its file
 * descriptor, shown by vmmap(1); 240..255 are for applications. */
#ifndef KP_DARWIN_MACH_VM_STATISTICS_H
#define KP_DARWIN_MACH_VM_STATISTICS_H
#define VM_MAKE_TAG(tag) ((tag) << 24)
#define VM_MEMORY_APPLICATION_SPECIFIC_1 240
#endif
