/* Programs run under valgrind memcheck with the pool preloaded (a build
 * that announces its blocks): `leak` loses one 64-byte block, `uaf`
 * reads a freed one, `clean` works every tier, threads, calloc, realloc
 * and aligned blocks and frees everything, so memcheck must find nothing.
 * tests/valgrind.sh checks what memcheck says about each. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile unsigned char sink;

__attribute__((noinline)) static void leak_one(void)
{
    char *p = malloc(64);
    memset(p, 1, 64);
    sink = (unsigned char)p[3];
}

__attribute__((noinline)) static void use_after_free(void)
{
    unsigned char *p = malloc(64);
    memset(p, 2, 64);
    free(p);
    sink = p[40];
}

static void *churn(void *arg)
{
    size_t seed = (size_t)(uintptr_t)arg;
    void *keep[64] = {0};
    for (int i = 0; i < 2000; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        size_t k = (seed >> 33) % 64;
        size_t size = (seed >> 40) % 3 == 0 ? (seed >> 20) % 200000 : (seed >> 24) % 600;
        free(keep[k]);
        keep[k] = (seed & 1) ? calloc(1, size + 1) : malloc(size + 1);
        memset(keep[k], (int)k, size + 1);
    }
    for (int k = 0; k < 64; k++)
        free(keep[k]);
    return NULL;
}

static void *free_it(void *p)
{
    free(p);
    return NULL;
}

static int clean(void)
{
    unsigned long sum = 0;
    char *big = calloc(1, 8 << 20); /* a mapping, zero */
    for (size_t i = 0; i < (8u << 20); i += 4096)
        sum += (unsigned char)big[i];
    free(big);
    big = malloc(40 << 20);
    memset(big, 3, 40 << 20);
    big = realloc(big, 50 << 20);
    sum += (unsigned char)big[(40 << 20) - 1];
    free(big);
    void *a = aligned_alloc(4096, 10000), *b = NULL;
    if (posix_memalign(&b, 64, 100) != 0)
        return 1;
    memset(a, 0, 10000);
    memset(b, 0, 100);
    free(a);
    free(b);
    char *r = malloc(10);
    for (int n = 11; n < 5000; n *= 2) {
        r = realloc(r, (size_t)n);
        r[n - 1] = 1;
    }
    free(r);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    churn((void *)(uintptr_t)9);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    /* A block freed by another thread than its allocator. */
    char *x = malloc(100);
    memset(x, 4, 100);
    pthread_t f;
    pthread_create(&f, NULL, free_it, x);
    pthread_join(f, NULL);
    printf("clean %lu\n", sum);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "leak") == 0)
        leak_one();
    else if (strcmp(what, "uaf") == 0)
        use_after_free();
    else if (strcmp(what, "clean") == 0)
        return clean();
    else
        return 2;
    return 0;
}
