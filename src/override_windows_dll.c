/* The pool's DLL redirects the process's malloc family as it loads
 * (override_windows.c).  Apart from the rest so that the static library
 * carries no DllMain: a program or DLL linking it has its own, and calls
 * kame_pool_redirect itself.
 *
 * At DLL_PROCESS_ATTACH the loader has bound the imports of every module
 * loaded with the pool, and has run no other code of theirs yet (their
 * DllMain and the program's start-up come after the pool's, which they
 * depend on), so their first malloc is already the pool's.  The walk only
 * reads PE headers, changes page protections and asks the loader about
 * modules already loaded, which the loader lock held here allows.  Thread
 * exit needs nothing here: the heap's fiber-local slot has its callback
 * (os_windows.c). */
#include "internal.h"

#include <windows.h>

BOOL WINAPI DllMain(HINSTANCE inst, DWORD reason, LPVOID reserved);

BOOL WINAPI DllMain(HINSTANCE inst, DWORD reason, LPVOID reserved) {
  (void)inst;
  (void)reserved;
  if (reason == DLL_PROCESS_ATTACH) kame_pool_redirect();
  return TRUE;
}
