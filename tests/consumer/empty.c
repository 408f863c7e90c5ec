/* Calls nothing: linked with the static library, it shows which of the
 * library's objects the link pulls in by itself. */
int main(void) { return 0; }
