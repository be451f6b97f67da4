#ifndef CNGHTTP2_SHIM_H
#define CNGHTTP2_SHIM_H
#include <nghttp2/nghttp2.h>

/* Linux readiness APIs the HTTP2 event loop needs; Swift's Glibc module does not export them. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
