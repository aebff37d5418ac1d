/* Replays every file of the corpus directories (or files) given on the
 * command line through LLVMFuzzerTestOneInput, the way zstd's
 * regression_driver.c does, so the fuzz corpus runs in every test run. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "%s: read failed\n", path);
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv)
{
    int files = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed += run_file(argv[i]) != 0;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            return 1;
        }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                names = realloc(names, cap * sizeof *names);
            }
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp_str);
        for (size_t j = 0; j < n; j++) {
            failed += run_file(names[j]) != 0;
            files++;
            free(names[j]);
        }
        free(names);
    }
    if (files == 0) {
        fprintf(stderr, "replay: no corpus files given\n");
        return 1;
    }
    printf("replay: %d files, %d unreadable\n", files, failed);
    return failed ? 1 : 0;
}
