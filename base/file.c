#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "skv_base.h"

int skv_file_read(const char *path, size_t max_len, uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return skv_error(SKV_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return skv_error(SKV_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_len) {
        close(fd);
        return skv_error(SKV_ERR_TOO_LARGE, "%s: %lld bytes exceeds the limit of %zu",
                         path, (long long)st.st_size, max_len);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = skv_malloc(n + 1);
    if (!buf) {
        close(fd);
        return skv_error(SKV_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            close(fd);
            skv_free(buf);
            return skv_error(SKV_ERR_IO, "%s: read: %s", path,
                             r < 0 ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *out_len = n;
    return SKV_OK;
}

int skv_pwrite_all(int fd, const void *b, size_t n, long long off)
{
    const uint8_t *p = b;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

int skv_file_write(const char *path, const void *data, size_t len)
{
    /* the rename below would replace whatever path names: never a device,
     * a directory or a link target such as /dev/null */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return skv_error(SKV_ERR_ARG, "%s exists and is not a regular file; not replacing it", path);
    char tmp[4096];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp)
        return skv_error(SKV_ERR_ARG, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return skv_error(SKV_ERR_IO, "%s: %s", tmp, strerror(errno));
    const int we = skv_pwrite_all(fd, data, len, 0);
    if (we) {
        close(fd);
        unlink(tmp);
        return skv_error(SKV_ERR_IO, "%s: write: %s", tmp, strerror(we));
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return skv_error(SKV_ERR_IO, "%s: fsync: %s", tmp, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return skv_error(SKV_ERR_IO, "%s: close: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return skv_error(SKV_ERR_IO, "rename %s -> %s: %s", tmp, path, strerror(e));
    }
    return SKV_OK;
}
