/* loadgen: closed-loop HTTP/1.1 load on the ledger service's posting routes, for
 * bench/bench_ledger.py (its `c` client). The Python clients spend more CPU per request than
 * the service's own HTTP work, on the same two cores; this one, like pgbench for the ceiling,
 * spends a few microseconds, so the measurement is the service's and PostgreSQL's.
 *
 * N keep-alive connections (a Unix socket or TCP), one request in flight on each: send, read
 * the whole response, record its latency, send the next, until the time is up. Single thread,
 * epoll. Bodies as the Python clients write them: holds with unique idempotency keys over 64
 * players; settlements of consecutive started matches from --first-match. With several --unix
 * sockets (ledger replicas), connections fill the first socket up to --fill of them, then the
 * next (the last takes the rest): what callers' fill-first routing does with one request in
 * flight per connection.
 *
 * Prints one JSON object: operations, errors, the first error, p50/p99 latency, per second,
 * and the next unused match number. Bounded: at most MAX_CLIENTS connections, responses of at
 * most RESPONSE_MAX bytes, at most MAX_RECORDED latencies (beyond that, counted only).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 256
#define REQUEST_MAX 2048
#define RESPONSE_MAX 65536
#define MAX_RECORDED 8000000
#define MAX_SOCKETS 16

struct conn {
    int fd;
    int index;
    long sequence;       /* requests this connection has sent */
    char request[REQUEST_MAX];
    size_t request_len, sent;
    char response[RESPONSE_MAX];
    size_t received;
    double started;
    int busy;
};

static const char *kind, *auth, *tcp_host;
static const char *unix_paths[MAX_SOCKETS];
static int unix_count, fill = MAX_CLIENTS;
static int tcp_port, clients, players = 64;
static long next_match, last_match;
static char nonce[17];
static double *latencies;
static long recorded, operations, errors;
static char first_error[256];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "loadgen: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* Connection `index` goes to the first socket up to `fill` connections, then the next. */
static int open_conn(int index) {
    int fd;
    if (unix_count) {
        int socket_index = index / fill < unix_count ? index / fill : unix_count - 1;
        const char *unix_path = unix_paths[socket_index];
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        if (strlen(unix_path) >= sizeof(a.sun_path)) {
            fprintf(stderr, "loadgen: socket path too long\n");
            exit(2);
        }
        strcpy(a.sun_path, unix_path);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(tcp_port)};
        if (inet_pton(AF_INET, tcp_host, &a.sin_addr) != 1) die("address");
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* The next request of `c`, written into its buffer; 0 when there is none (out of matches). */
static int build(struct conn *c) {
    char body[512];
    const char *path;
    int n;
    c->sequence++;
    if (kind[0] == 'h') {
        path = "/v1/holds";
        char key[128];
        snprintf(key, sizeof key, "h-c-%d-%d-%ld-%s", clients, c->index, c->sequence, nonce);
        n = snprintf(body, sizeof body,
                     "{\"idempotency_key\":\"%s\",\"player\":\"bp%ld\",\"reservation_id\":\"%s\","
                     "\"amount\":1,\"table_id\":\"bench\"}",
                     key, ((long)c->index * 7 + c->sequence) % players, key);
    } else {
        if (next_match > last_match) {
            errors++;
            if (!first_error[0]) strcpy(first_error, "out of started matches");
            return 0;
        }
        long m = next_match++;
        path = "/v1/matches/settle";
        n = snprintf(body, sizeof body,
                     "{\"idempotency_key\":\"settle-%ld\",\"match_id\":\"bm-%ld\","
                     "\"winners\":[{\"player\":\"bp%ld\"}]}",
                     m, m, m % players);
    }
    int len = snprintf(c->request, REQUEST_MAX,
                       "POST %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: %s\r\n"
                       "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                       path, auth, n, body);
    if (len <= 0 || len >= REQUEST_MAX) {
        fprintf(stderr, "loadgen: request too long\n");
        exit(2);
    }
    c->request_len = (size_t)len;
    c->sent = 0;
    c->received = 0;
    return 1;
}

static void send_some(struct conn *c) {
    while (c->sent < c->request_len) {
        ssize_t w = write(c->fd, c->request + c->sent, c->request_len - c->sent);
        if (w < 0) {
            if (errno == EAGAIN) return; /* the rest when EPOLLOUT says so */
            die("write");
        }
        c->sent += (size_t)w;
    }
}

/* 1 when the response in `c` is complete (status and body length known and all there). */
static int complete(struct conn *c, int *status, char **body, size_t *body_len) {
    char *end = memmem(c->response, c->received, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = (size_t)(end - c->response) + 4;
    long length = -1;
    for (char *line = c->response; line < end;) {
        char *eol = memmem(line, (size_t)(end - line) + 2, "\r\n", 2);
        if (!eol) break;
        if (eol - line > 15 && strncasecmp(line, "content-length:", 15) == 0)
            length = strtol(line + 15, NULL, 10);
        line = eol + 2;
    }
    if (length < 0) {
        fprintf(stderr, "loadgen: response without Content-Length\n");
        exit(2);
    }
    if (c->received < head + (size_t)length) return 0;
    if (c->received > head + (size_t)length) {
        fprintf(stderr, "loadgen: bytes after the response\n");
        exit(2);
    }
    *status = atoi(c->response + 9); /* "HTTP/1.1 200" */
    *body = c->response + head;
    *body_len = (size_t)length;
    return 1;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(double fraction) {
    if (recorded == 0) return 0.0;
    long i = (long)(fraction * (double)recorded + 0.5) - 1;
    if (i < 0) i = 0;
    if (i >= recorded) i = recorded - 1;
    return latencies[i];
}

int main(int argc, char **argv) {
    double seconds = 3.0;
    const char *tcp = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--unix")) {
            if (unix_count == MAX_SOCKETS) {
                fprintf(stderr, "loadgen: at most %d sockets\n", MAX_SOCKETS);
                return 2;
            }
            unix_paths[unix_count++] = v;
        } else if (!strcmp(k, "--fill")) fill = atoi(v);
        else if (!strcmp(k, "--tcp")) tcp = v;
        else if (!strcmp(k, "--kind")) kind = v;
        else if (!strcmp(k, "--clients")) clients = atoi(v);
        else if (!strcmp(k, "--seconds")) seconds = atof(v);
        else if (!strcmp(k, "--auth")) auth = v;
        else if (!strcmp(k, "--first-match")) next_match = atol(v);
        else if (!strcmp(k, "--last-match")) last_match = atol(v);
        else {
            fprintf(stderr, "loadgen: unknown option %s\n", k);
            return 2;
        }
    }
    if (!kind || (strcmp(kind, "hold") && strcmp(kind, "settle")) || !auth ||
        clients < 1 || clients > MAX_CLIENTS || seconds <= 0 || seconds > 600 ||
        (!unix_count == !tcp) || fill < 1) {
        fprintf(stderr,
                "usage: loadgen --unix PATH [--unix PATH ... --fill N] | --tcp HOST:PORT "
                "--kind hold|settle --clients N --seconds S --auth TOKEN "
                "[--first-match M --last-match M]\n");
        return 2;
    }
    static char host[64];
    if (tcp) {
        const char *colon = strrchr(tcp, ':');
        if (!colon || (size_t)(colon - tcp) >= sizeof host) {
            fprintf(stderr, "loadgen: --tcp wants HOST:PORT\n");
            return 2;
        }
        memcpy(host, tcp, (size_t)(colon - tcp));
        tcp_host = host;
        tcp_port = atoi(colon + 1);
    }
    unsigned char raw[8];
    int urandom = open("/dev/urandom", O_RDONLY);
    if (urandom < 0 || read(urandom, raw, sizeof raw) != (ssize_t)sizeof raw) die("urandom");
    close(urandom);
    for (int i = 0; i < 8; i++) sprintf(nonce + 2 * i, "%02x", raw[i]);

    latencies = malloc(sizeof(double) * MAX_RECORDED);
    struct conn *conns = calloc((size_t)clients, sizeof(struct conn));
    if (!latencies || !conns) die("malloc");
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll");
    double began = now_s(), stop_at = began + seconds;
    int busy = 0;
    for (int i = 0; i < clients; i++) {
        struct conn *c = &conns[i];
        c->index = i;
        c->fd = open_conn(i);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
        if (build(c)) {
            c->busy = 1;
            busy++;
            c->started = now_s();
            send_some(c);
        }
    }
    struct epoll_event events[MAX_CLIENTS];
    while (busy > 0) {
        int n = epoll_wait(ep, events, MAX_CLIENTS, 10000);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        if (n == 0) {
            fprintf(stderr, "loadgen: no answer for 10 s\n");
            return 1;
        }
        for (int e = 0; e < n; e++) {
            struct conn *c = events[e].data.ptr;
            if (!c->busy) continue;
            if (events[e].events & EPOLLOUT) send_some(c);
            if (!(events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
            for (;;) {
                if (c->received == RESPONSE_MAX) {
                    fprintf(stderr, "loadgen: response over %d bytes\n", RESPONSE_MAX);
                    return 1;
                }
                ssize_t r = read(c->fd, c->response + c->received, RESPONSE_MAX - c->received);
                if (r < 0) {
                    if (errno == EAGAIN) break;
                    die("read");
                }
                if (r == 0) {
                    fprintf(stderr, "loadgen: the server closed a connection\n");
                    return 1;
                }
                c->received += (size_t)r;
                int status;
                char *body;
                size_t body_len;
                if (!complete(c, &status, &body, &body_len)) continue;
                double t = now_s();
                operations++;
                if (recorded < MAX_RECORDED) latencies[recorded++] = t - c->started;
                if (status != 200) {
                    errors++;
                    if (!first_error[0])
                        snprintf(first_error, sizeof first_error, "%d %.*s", status,
                                 (int)(body_len < 200 ? body_len : 200), body);
                }
                if (t < stop_at && build(c)) {
                    c->started = t;
                    send_some(c);
                } else {
                    c->busy = 0;
                    busy--;
                }
                break;
            }
        }
    }
    double elapsed = now_s() - began;
    qsort(latencies, (size_t)recorded, sizeof(double), cmp);
    printf("{\"operations\": %ld, \"errors\": %ld, \"per_s\": %.1f, \"p50_ms\": %.3f, "
           "\"p99_ms\": %.3f, \"elapsed_s\": %.3f, \"next_match\": %ld, \"first_error\": \"",
           operations, errors, (double)operations / elapsed, percentile(0.50) * 1000,
           percentile(0.99) * 1000, elapsed, next_match);
    for (const char *p = first_error; *p; p++) /* JSON string: escape what needs it */
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if ((unsigned char)*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    printf("\"}\n");
    for (int i = 0; i < clients; i++) close(conns[i].fd);
    return 0;
}
