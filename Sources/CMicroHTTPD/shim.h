#ifndef CMICROHTTPD_SHIM_H
#define CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

/* MHD_start_daemon is variadic (not callable from Swift): this wrapper fixes the options the admin
 * port uses. `address` is an IPv4 address in dotted form ("0.0.0.0", "127.0.0.1"); `port` 0 lets
 * the kernel pick one (read it back with push_mhd_bound_port). Suspend/resume is enabled (it implies
 * MHD_USE_ITC): async routes suspend their connection while a Swift task prepares the answer.
 * Returns NULL when the daemon cannot start (address in use, bad address). */
static inline struct MHD_Daemon *push_mhd_start(
    const char *address, uint16_t port, unsigned int connection_limit, unsigned int connection_timeout_seconds,
    MHD_AccessHandlerCallback handler, void *handler_context) {
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    if (inet_pton(AF_INET, address, &sin.sin_addr) != 1) return NULL;
    return MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_SUSPEND_RESUME, port, NULL, NULL, handler, handler_context,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sin,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_END);
}

/* The port the daemon listens on (MHD_DAEMON_INFO_BIND_PORT); 0 when unknown. */
static inline uint16_t push_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}
#endif
