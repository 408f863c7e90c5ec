/* Replays fuzz inputs through the fuzz target without libFuzzer, so the
 * committed corpus and regressions run in every build (`make test`, the
 * sanitizer builds).  Arguments are files or directories; a directory's
 * files run in name order, skipping dot files and *.md.  Fails when no
 * input was found, so a misplaced corpus cannot pass unnoticed. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned replayed;

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (buf == NULL) {
            fprintf(stderr, "%s: out of memory\n", path);
            fclose(f);
            return 1;
        }
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        unsigned char *bigger = realloc(buf, cap);
        if (bigger == NULL)
            free(buf);
        buf = bigger;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        return 1;
    }
    printf("replay %s (%zu bytes)\n", path, n);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    replayed++;
    return 0;
}

static int wanted(const char *name)
{
    size_t len = strlen(name);
    return name[0] != '.' && !(len >= 3 && strcmp(name + len - 3, ".md") == 0);
}

static int run_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        perror(dir);
        return 1;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (!bad && wanted(names[i]->d_name)) {
            size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
            char *path = malloc(len);
            if (path == NULL) {
                bad = 1;
            } else {
                snprintf(path, len, "%s/%s", dir, names[i]->d_name);
                struct stat st;
                if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                    bad = run_file(path);
                free(path);
            }
        }
        free(names[i]);
    }
    free(names);
    return bad;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]))
            return 1;
    }
    if (replayed == 0) {
        fprintf(stderr, "fuzz_replay: no input found\n");
        return 1;
    }
    printf("fuzz_replay: %u inputs passed\n", replayed);
    return 0;
}
