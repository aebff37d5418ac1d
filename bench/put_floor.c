/* The floor under a raw KV.PUT: a server that does only what any durable,
 * encrypted PUT over a Unix socket must do -- receive the value, seal it
 * (ChaCha20-Poly1305, as seqkv's records are sealed, in 1 MiB pieces),
 * write it to a file of its own and fdatasync it before it replies -- and
 * nothing else: no record, no index, no copy beyond the cipher's, no hot
 * tier. Two threads: one receives pieces into a ring of reused buffers,
 * the other seals each into a reused buffer and writes it (pwrite), so the
 * receiving, the sealing and the page cache's copy overlap. bench/put_floor.py
 * times it beside dd and `seqkv serve` with the same client and bytes.
 *
 * It speaks the one RESP request the bench sends: an array of bulk
 * strings whose last is the value (any other argument is read and
 * ignored), and replies :0. Each value goes to DIR/v<n> (the file of the
 * value before the last is removed, so two stay on disk).
 *
 * --writeback: start each piece's writeback as soon as it is written
 * (sync_file_range), so the disk works while the value still arrives and
 * the closing fdatasync waits for the last pieces only -- what a PUT that
 * seals as it receives could reach; without it the page cache holds the
 * whole value until the fdatasync, as dd's does until its own.
 *
 * usage: put_floor SOCKET DIR [--no-seal] [--writeback]
 *   (serves one client, then exits) */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PIECE ((size_t)1 << 20)
#define RING 4
#define TAG 16

typedef struct {
    uint8_t *buf[RING];
    size_t len[RING];
    int last[RING]; /* the value's last piece */
    size_t head, tail;  /* pieces received, pieces written */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const char *dir;
    int seal, writeback;
    uint64_t values;  /* values written (their files) */
    int replied_fd;   /* the client: the writer replies when a value is durable */
} floor_ctx;

static void die(const char *what)
{
    fprintf(stderr, "put_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void read_full(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = read(fd, b, n);
        if (k == 0)
            exit(0); /* the client left */
        if (k < 0) {
            if (errno == EINTR)
                continue;
            die("read");
        }
        b += k;
        n -= (size_t)k;
    }
}

/* one RESP line (up to \r\n) from fd, byte by byte (headers only) */
static void read_line(int fd, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        char c;
        read_full(fd, &c, 1);
        if (c == '\n')
            break;
        if (n + 1 < cap && c != '\r')
            out[n++] = c;
    }
    out[n] = 0;
}

static void value_path(const floor_ctx *x, uint64_t n, char *out, size_t cap)
{
    snprintf(out, cap, "%s/v%llu", x->dir, (unsigned long long)n);
}

/* Seal and write the pieces as they come, until the process exits (the
 * client leaving ends it: read_full) */
static void *writer_main(void *v)
{
    floor_ctx *x = v;
    uint8_t *out = malloc(PIECE + TAG), key[32], nonce[12] = {0};
    EVP_CIPHER_CTX *cc = EVP_CIPHER_CTX_new();
    if (!out || !cc)
        die("writer");
    memset(out, 0, PIECE + TAG);
    for (size_t i = 0; i < 32; i++)
        key[i] = (uint8_t)(i * 7 + 1);
    off_t at = 0;
    uint64_t piece_no = 0;
    int fd = -1;
    for (;;) {
        pthread_mutex_lock(&x->mu);
        while (x->tail == x->head)
            pthread_cond_wait(&x->cv, &x->mu);
        const size_t slot = x->tail % RING, n = x->len[slot];
        const int last = x->last[slot];
        pthread_mutex_unlock(&x->mu);
        if (fd < 0) {
            char path[4096];
            value_path(x, x->values, path, sizeof path);
            if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
                die(path);
            at = 0;
        }
        const uint8_t *w = x->buf[slot];
        size_t wn = n;
        if (x->seal) {
            int l = 0, l2 = 0;
            memcpy(nonce, &piece_no, sizeof piece_no);
            piece_no++;
            if (!EVP_EncryptInit_ex(cc, EVP_chacha20_poly1305(), NULL, key, nonce) ||
                !EVP_EncryptUpdate(cc, out, &l, x->buf[slot], (int)n) ||
                !EVP_EncryptFinal_ex(cc, out + l, &l2) ||
                !EVP_CIPHER_CTX_ctrl(cc, EVP_CTRL_AEAD_GET_TAG, TAG, out + n))
                die("seal");
            w = out;
            wn = n + TAG;
        }
        for (size_t o = 0; o < wn;) {
            ssize_t k = pwrite(fd, w + o, wn - o, at);
            if (k < 0)
                die("pwrite");
            o += (size_t)k;
            at += k;
        }
        if (x->writeback && sync_file_range(fd, at - (off_t)wn, (off_t)wn, SYNC_FILE_RANGE_WRITE))
            die("sync_file_range");
        pthread_mutex_lock(&x->mu);
        x->tail++;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        if (last) {
            if (fdatasync(fd))
                die("fdatasync");
            close(fd);
            fd = -1;
            if (x->values >= 2) {
                char old[4096];
                value_path(x, x->values - 2, old, sizeof old);
                unlink(old);
            }
            x->values++;
            if (write(x->replied_fd, ":0\r\n", 4) != 4)
                die("reply");
        }
    }
    return NULL; /* (not reached) */
}

/* receive n bytes of a value into the ring, a piece at a time */
static void receive_value(floor_ctx *x, int c, size_t n)
{
    while (n) {
        const size_t k = n < PIECE ? n : PIECE;
        pthread_mutex_lock(&x->mu);
        while (x->head - x->tail == RING)
            pthread_cond_wait(&x->cv, &x->mu);
        const size_t slot = x->head % RING;
        pthread_mutex_unlock(&x->mu);
        read_full(c, x->buf[slot], k);
        n -= k;
        pthread_mutex_lock(&x->mu);
        x->len[slot] = k;
        x->last[slot] = n == 0;
        x->head++;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
    }
}

int main(int argc, char **argv)
{
    floor_ctx x = {.dir = argc >= 3 ? argv[2] : NULL, .seal = 1};
    int bad = argc < 3;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--no-seal"))
            x.seal = 0;
        else if (!strcmp(argv[i], "--writeback"))
            x.writeback = 1;
        else
            bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: put_floor SOCKET DIR [--no-seal] [--writeback]\n");
        return 2;
    }
    pthread_mutex_init(&x.mu, NULL);
    pthread_cond_init(&x.cv, NULL);
    for (int i = 0; i < RING; i++) {
        if (!(x.buf[i] = malloc(PIECE)))
            die("malloc");
        memset(x.buf[i], 0, PIECE); /* (touched once, reused warm) */
    }
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (ls < 0 || strlen(argv[1]) >= sizeof a.sun_path)
        die("socket");
    strcpy(a.sun_path, argv[1]);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1))
        die("bind");
    int c = accept(ls, NULL, NULL);
    if (c < 0)
        die("accept");
    x.replied_fd = c;
    pthread_t w;
    if (pthread_create(&w, NULL, writer_main, &x))
        die("pthread_create");
    char line[128];
    for (;;) {
        read_line(c, line, sizeof line);
        if (line[0] != '*')
            die("not a RESP array");
        const long argn = strtol(line + 1, NULL, 10);
        for (long i = 0; i < argn; i++) {
            read_line(c, line, sizeof line);
            const size_t n = (size_t)strtoull(line + 1, NULL, 10);
            if (i == argn - 1) {
                receive_value(&x, c, n);
            } else {
                uint8_t small[4096];
                for (size_t o = 0; o < n;) {
                    const size_t k = n - o < sizeof small ? n - o : sizeof small;
                    read_full(c, small, k);
                    o += k;
                }
            }
            read_full(c, line, 2); /* \r\n */
        }
    }
}
