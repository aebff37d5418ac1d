/* A program built against the installed seqkv alone (seqkv.pc, seqkv.h,
 * seqkv_client.h, libseqkv): its version, a put and a get through the
 * embedded store, a blob, and the client's error for a missing server.
 * usage: use_seqkv DIR (an empty directory it may write) */
#include <seqkv.h>
#include <seqkv_client.h>

#include <stdio.h>
#include <string.h>

#define CHECK(c, ...)                                                                            \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            fprintf(stderr, "use_seqkv: " __VA_ARGS__);                                          \
            fprintf(stderr, " (%s)\n", seqkv_error_detail());                                   \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d.%d", SEQKV_VERSION_MAJOR, SEQKV_VERSION_MINOR,
             SEQKV_VERSION_PATCH);
    CHECK(argc == 2, "usage: use_seqkv DIR");
    CHECK(strcmp(seqkv_version(), ver) == 0, "library %s, header %s", seqkv_version(), ver);
    CHECK(seqkv_version_number() == SEQKV_VERSION_NUMBER, "version numbers differ");

    seqkv_options o = SEQKV_OPTIONS_INIT;
    o.quiet = 1;
    seqkv *db = NULL;
    CHECK(seqkv_open(argv[1], &o, &db) == 0, "open %s", argv[1]);
    seqkv_profile p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "tiny");
    p.layers = 2, p.kv_heads = 1, p.head_dim = 4, p.dtype = SEQKV_DT_BF16, p.chunk = 4;
    CHECK(seqkv_profile_set(db, &p) == 0, "profile");
    enum { N = 10, KV = 2 * 2 * N * 4 * 2 };
    int32_t tok[N];
    unsigned char kv[KV], back[KV];
    for (int i = 0; i < N; i++)
        tok[i] = 7 * i + 1;
    for (int i = 0; i < KV; i++)
        kv[i] = (unsigned char)(i * 37 + 11);
    seqkv_put_result res;
    CHECK(seqkv_put(db, "t", "tiny", tok, N, kv, KV, NULL, &res) == 0, "put");
    size_t got = 0;
    CHECK(seqkv_get(db, "t", "tiny", tok, N, NULL, back, sizeof back, &got) == 0, "get");
    CHECK(got == N && memcmp(kv, back, KV) == 0, "get returned other bytes (%zu tokens)", got);
    const uint8_t *key = (const uint8_t *)"k";
    size_t klen = 1;
    seqkv_blob_item item = {key, klen, kv, 16, NULL, 0};
    CHECK(seqkv_blob_set(db, "t", &item, 1, 0, 0, NULL) == 0, "blob set");
    seqkv_close(db);

    seqkv_client *c = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/no-server.sock", argv[1]);
    CHECK(seqkv_client_connect(path, &c) == SKV_ERR_IO, "connect to no server: not SKV_ERR_IO");
    CHECK(strcmp(seqkv_strerror(SKV_ERR_IO), "I/O error") == 0, "strerror");
    printf("use_seqkv: seqkv %s: put, get, blob set, client error: ok\n", seqkv_version());
    return 0;
}
