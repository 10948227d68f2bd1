/*
 * dbus-flood: baseline sender and plain-libdbus receiver for the D-Bus
 * receive benchmark (scripts/bench-dbus).
 *
 *   dbus-flood send    --address ADDR --count N [--devices D]
 *   dbus-flood receive --address ADDR --count N
 *
 * Build: cc -O2 -o dbus-flood dbus-flood.c $(pkg-config --cflags --libs dbus-1)
 *
 * The message stream and the checksum contract are described in
 * scripts/bench/README.md. In short, message i (0-based) uses slot
 * j = i % P (P = max(8192, D)) and is a BlueZ-shaped
 *   PropertiesChanged("org.bluez.Device1",
 *                     {"RSSI": <int16 -40 - (j % 51)>,
 *                      "ManufacturerData": <{0x0499: <ay of 24 bytes>}>},
 *                     [])
 * on path /org/bluez/hci0/dev_C0_FE_00_XX_XX_XX (device j % D), and
 *   checksum = sum over messages of RSSI (signed)
 *            + sum over every manufacturer-data byte (unsigned, 0..255).
 *
 * Output: one JSON line on stdout when done. The receiver prints "READY"
 * first, once its match rule is installed.
 */
#define _GNU_SOURCE
#include <dbus/dbus.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MFG_COMPANY 0x0499u /* Ruuvi Innovations */
#define MFG_LEN 24          /* RuuviTag data format 5 payload length */
#define MATCH_RULE                                                          \
  "type='signal',interface='org.freedesktop.DBus.Properties',"              \
  "member='PropertiesChanged',path_namespace='/org/bluez'"

static void die(const char *what, const char *why) {
  fprintf(stderr, "dbus-flood: %s: %s\n", what, why ? why : "failed");
  exit(2);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static DBusConnection *connect_bus(const char *address) {
  DBusError err;
  dbus_error_init(&err);
  DBusConnection *conn = dbus_connection_open_private(address, &err);
  if (conn == NULL) die("connect", err.message);
  if (!dbus_bus_register(conn, &err)) die("Hello", err.message);
  dbus_connection_set_exit_on_disconnect(conn, FALSE);
  return conn;
}

/* ------------------------------------------------------------------ send */

static int append_variant_int16(DBusMessageIter *dict, const char *key,
                                dbus_int16_t v) {
  DBusMessageIter entry, var;
  if (!dbus_message_iter_open_container(dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry)) return 0;
  if (!dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key)) return 0;
  if (!dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "n", &var)) return 0;
  if (!dbus_message_iter_append_basic(&var, DBUS_TYPE_INT16, &v)) return 0;
  if (!dbus_message_iter_close_container(&entry, &var)) return 0;
  return dbus_message_iter_close_container(dict, &entry);
}

static int append_mfg(DBusMessageIter *dict, const unsigned char *bytes, int n) {
  const char *key = "ManufacturerData";
  dbus_uint16_t company = MFG_COMPANY;
  DBusMessageIter entry, var, arr, mentry, mvar, bytearr;
  if (!dbus_message_iter_open_container(dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry)) return 0;
  if (!dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key)) return 0;
  if (!dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "a{qv}", &var)) return 0;
  if (!dbus_message_iter_open_container(&var, DBUS_TYPE_ARRAY, "{qv}", &arr)) return 0;
  if (!dbus_message_iter_open_container(&arr, DBUS_TYPE_DICT_ENTRY, NULL, &mentry)) return 0;
  if (!dbus_message_iter_append_basic(&mentry, DBUS_TYPE_UINT16, &company)) return 0;
  if (!dbus_message_iter_open_container(&mentry, DBUS_TYPE_VARIANT, "ay", &mvar)) return 0;
  if (!dbus_message_iter_open_container(&mvar, DBUS_TYPE_ARRAY, "y", &bytearr)) return 0;
  if (!dbus_message_iter_append_fixed_array(&bytearr, DBUS_TYPE_BYTE, &bytes, n)) return 0;
  if (!dbus_message_iter_close_container(&mvar, &bytearr)) return 0;
  if (!dbus_message_iter_close_container(&mentry, &mvar)) return 0;
  if (!dbus_message_iter_close_container(&arr, &mentry)) return 0;
  if (!dbus_message_iter_close_container(&var, &arr)) return 0;
  if (!dbus_message_iter_close_container(&entry, &var)) return 0;
  return dbus_message_iter_close_container(dict, &entry);
}

/* Builds the signal for pool slot j with libdbus and marshals it to bytes.
 * Adds the slot's checksum contribution to *sum. */
static void build_slot(long j, long devices, const char *path, char **out, int *out_len,
                       int64_t *sum) {
  const char *iface = "org.bluez.Device1";
  unsigned char mfg[MFG_LEN];
  long d = j % devices;
  dbus_int16_t rssi = (dbus_int16_t)(-40 - (int)(j % 51));
  /* RuuviTag RAWv2-like: format byte 5, then readings that change. */
  mfg[0] = 0x05;
  for (int k = 1; k < MFG_LEN; k++) mfg[k] = (unsigned char)((j * 7 + k * 13 + d) & 0xff);
  *sum = rssi;
  for (int k = 0; k < MFG_LEN; k++) *sum += mfg[k];

  DBusMessage *msg =
      dbus_message_new_signal(path, "org.freedesktop.DBus.Properties", "PropertiesChanged");
  if (msg == NULL) die("new_signal", NULL);
  DBusMessageIter it, dict, inval;
  dbus_message_iter_init_append(msg, &it);
  if (!dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &iface) ||
      !dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict) ||
      !append_variant_int16(&dict, "RSSI", rssi) || !append_mfg(&dict, mfg, MFG_LEN) ||
      !dbus_message_iter_close_container(&it, &dict) ||
      !dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "s", &inval) ||
      !dbus_message_iter_close_container(&it, &inval))
    die("build message", "out of memory");
  dbus_message_set_no_reply(msg, TRUE);
  dbus_message_set_serial(msg, 1);
  if (!dbus_message_marshal(msg, out, out_len)) die("marshal", "out of memory");
  dbus_message_unref(msg);
}

static void put_serial(char *m, dbus_uint32_t serial) {
  unsigned char *p = (unsigned char *)m + 8; /* header: endian,type,flags,ver,len,serial */
  if (m[0] == 'l') {
    p[0] = serial & 0xff; p[1] = (serial >> 8) & 0xff;
    p[2] = (serial >> 16) & 0xff; p[3] = (serial >> 24) & 0xff;
  } else {
    p[3] = serial & 0xff; p[2] = (serial >> 8) & 0xff;
    p[1] = (serial >> 16) & 0xff; p[0] = (serial >> 24) & 0xff;
  }
}

static void write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w > 0) { buf += w; len -= (size_t)w; continue; }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      if (poll(&pfd, 1, -1) < 0 && errno != EINTR) die("poll", strerror(errno));
      continue;
    }
    die("write", w < 0 ? strerror(errno) : "short write");
  }
}

/* The messages are built and marshalled by libdbus once, into a pool of
 * POOL_MIN (or D, if larger) distinct slots; message i is slot i % P with a
 * fresh serial. They are then written straight to the authenticated socket
 * in 64 KiB batches, so the sender costs well under a microsecond per
 * message and leaves the CPU to the bus daemon and the receiver under test. */
#define POOL_MIN 8192
static int cmd_send(const char *address, long count, long devices) {
  long pool = devices > POOL_MIN ? devices : POOL_MIN;
  char **slot = calloc((size_t)pool, sizeof(char *));
  int *slot_len = calloc((size_t)pool, sizeof(int));
  int64_t *slot_sum = calloc((size_t)pool, sizeof(int64_t));
  if (slot == NULL || slot_len == NULL || slot_sum == NULL) die("alloc", NULL);
  for (long j = 0; j < pool; j++) {
    long d = j % devices;
    char path[64];
    /* Random-static-looking MAC: C0:FE:00:<d>. */
    snprintf(path, sizeof path, "/org/bluez/hci0/dev_C0_FE_00_%02X_%02X_%02X",
             (unsigned)((d >> 16) & 0xff), (unsigned)((d >> 8) & 0xff), (unsigned)(d & 0xff));
    build_slot(j, devices, path, &slot[j], &slot_len[j], &slot_sum[j]);
  }

  DBusConnection *conn = connect_bus(address);
  dbus_connection_flush(conn);
  int fd = -1;
  if (!dbus_connection_get_unix_fd(conn, &fd)) die("get_unix_fd", "not a unix socket");

  int64_t checksum = 0;
  size_t cap = 1 << 16, used = 0;
  char *batch = malloc(cap + 4096);
  if (batch == NULL) die("alloc", NULL);
  double t0 = now_s();
  double c0 = cpu_s();
  for (long i = 0; i < count; i++) {
    long j = i % pool;
    checksum += slot_sum[j];
    if (used + (size_t)slot_len[j] > cap) {
      write_all(fd, batch, used);
      used = 0;
    }
    if ((size_t)slot_len[j] > cap) die("marshal", "message larger than batch");
    memcpy(batch + used, slot[j], (size_t)slot_len[j]);
    put_serial(batch + used, (dbus_uint32_t)(1000000u + (dbus_uint32_t)(i % 2000000000L)));
    used += (size_t)slot_len[j];
  }
  write_all(fd, batch, used);

  /* Round trip: the bus handles one connection's messages in order, so once
   * this reply arrives every signal above has been routed to the receivers. */
  DBusError err;
  dbus_error_init(&err);
  DBusMessage *ping = dbus_message_new_method_call(
      "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId");
  if (ping == NULL) die("GetId", "out of memory");
  DBusMessage *reply = dbus_connection_send_with_reply_and_block(conn, ping, 300000, &err);
  if (reply == NULL) die("GetId", err.message);
  dbus_message_unref(reply);
  dbus_message_unref(ping);

  double wall = now_s() - t0;
  double cpu = cpu_s() - c0;
  printf("{\"impl\":\"sender\",\"messages\":%ld,\"devices\":%ld,\"pool\":%ld,\"bytes_per_msg\":%d,"
         "\"wall_s\":%.6f,\"cpu_s\":%.6f,\"checksum\":%" PRId64 "}\n",
         count, devices, pool, slot_len[0], wall, cpu, checksum);
  fflush(stdout);
  dbus_connection_close(conn);
  dbus_connection_unref(conn);
  for (long j = 0; j < pool; j++) dbus_free(slot[j]);
  free(slot); free(slot_len); free(slot_sum); free(batch);
  return 0;
}

/* --------------------------------------------------------------- receive */

struct rx_state {
  long want;
  long got;
  long bad;
  int64_t checksum;
  double first_s;
  double last_s;
};

/* Generic full decode of one value at `it`; adds to checksum only for the
 * fields the contract names (handled by the callers). Returns 0 on a
 * malformed value. */
static int walk_value(DBusMessageIter *it, int64_t *sink) {
  int t = dbus_message_iter_get_arg_type(it);
  switch (t) {
  case DBUS_TYPE_BYTE:
  case DBUS_TYPE_BOOLEAN:
  case DBUS_TYPE_INT16:
  case DBUS_TYPE_UINT16:
  case DBUS_TYPE_INT32:
  case DBUS_TYPE_UINT32:
  case DBUS_TYPE_INT64:
  case DBUS_TYPE_UINT64:
  case DBUS_TYPE_DOUBLE:
  case DBUS_TYPE_UNIX_FD: {
    DBusBasicValue v;
    dbus_message_iter_get_basic(it, &v);
    *sink ^= (int64_t)v.u64;
    return 1;
  }
  case DBUS_TYPE_STRING:
  case DBUS_TYPE_OBJECT_PATH:
  case DBUS_TYPE_SIGNATURE: {
    const char *s;
    dbus_message_iter_get_basic(it, &s);
    *sink ^= (int64_t)(unsigned char)s[0];
    return 1;
  }
  case DBUS_TYPE_ARRAY:
  case DBUS_TYPE_STRUCT:
  case DBUS_TYPE_DICT_ENTRY:
  case DBUS_TYPE_VARIANT: {
    DBusMessageIter sub;
    dbus_message_iter_recurse(it, &sub);
    while (dbus_message_iter_get_arg_type(&sub) != DBUS_TYPE_INVALID) {
      if (!walk_value(&sub, sink)) return 0;
      dbus_message_iter_next(&sub);
    }
    return 1;
  }
  default:
    return 0;
  }
}

/* a{qv} with ay values: sums the bytes. */
static int decode_mfg(DBusMessageIter *var, int64_t *checksum, int64_t *sink) {
  if (dbus_message_iter_get_arg_type(var) != DBUS_TYPE_ARRAY) return 0;
  DBusMessageIter arr;
  dbus_message_iter_recurse(var, &arr);
  while (dbus_message_iter_get_arg_type(&arr) == DBUS_TYPE_DICT_ENTRY) {
    DBusMessageIter entry, v;
    dbus_message_iter_recurse(&arr, &entry);
    if (dbus_message_iter_get_arg_type(&entry) != DBUS_TYPE_UINT16) return 0;
    dbus_uint16_t company;
    dbus_message_iter_get_basic(&entry, &company);
    *sink ^= company;
    dbus_message_iter_next(&entry);
    if (dbus_message_iter_get_arg_type(&entry) != DBUS_TYPE_VARIANT) return 0;
    dbus_message_iter_recurse(&entry, &v);
    if (dbus_message_iter_get_arg_type(&v) == DBUS_TYPE_ARRAY &&
        dbus_message_iter_get_element_type(&v) == DBUS_TYPE_BYTE) {
      DBusMessageIter bytes;
      const unsigned char *p = NULL;
      int n = 0;
      dbus_message_iter_recurse(&v, &bytes);
      dbus_message_iter_get_fixed_array(&bytes, &p, &n);
      for (int k = 0; k < n; k++) *checksum += p[k];
    } else if (!walk_value(&v, sink)) {
      return 0;
    }
    dbus_message_iter_next(&arr);
  }
  return 1;
}

static int decode_properties_changed(DBusMessage *msg, int64_t *checksum, int64_t *sink) {
  DBusMessageIter it;
  if (!dbus_message_iter_init(msg, &it)) return 0;
  if (dbus_message_iter_get_arg_type(&it) != DBUS_TYPE_STRING) return 0;
  const char *iface;
  dbus_message_iter_get_basic(&it, &iface);
  if (strcmp(iface, "org.bluez.Device1") != 0) return 0;
  dbus_message_iter_next(&it);

  if (dbus_message_iter_get_arg_type(&it) != DBUS_TYPE_ARRAY) return 0;
  DBusMessageIter dict;
  dbus_message_iter_recurse(&it, &dict);
  while (dbus_message_iter_get_arg_type(&dict) == DBUS_TYPE_DICT_ENTRY) {
    DBusMessageIter entry, var;
    const char *key;
    dbus_message_iter_recurse(&dict, &entry);
    if (dbus_message_iter_get_arg_type(&entry) != DBUS_TYPE_STRING) return 0;
    dbus_message_iter_get_basic(&entry, &key);
    dbus_message_iter_next(&entry);
    if (dbus_message_iter_get_arg_type(&entry) != DBUS_TYPE_VARIANT) return 0;
    dbus_message_iter_recurse(&entry, &var);
    if (strcmp(key, "RSSI") == 0 && dbus_message_iter_get_arg_type(&var) == DBUS_TYPE_INT16) {
      dbus_int16_t rssi;
      dbus_message_iter_get_basic(&var, &rssi);
      *checksum += rssi;
    } else if (strcmp(key, "ManufacturerData") == 0) {
      if (!decode_mfg(&var, checksum, sink)) return 0;
    } else if (!walk_value(&var, sink)) {
      return 0;
    }
    dbus_message_iter_next(&dict);
  }
  dbus_message_iter_next(&it);

  if (dbus_message_iter_get_arg_type(&it) != DBUS_TYPE_ARRAY) return 0;
  DBusMessageIter inval;
  dbus_message_iter_recurse(&it, &inval);
  while (dbus_message_iter_get_arg_type(&inval) == DBUS_TYPE_STRING) {
    const char *name;
    dbus_message_iter_get_basic(&inval, &name);
    *sink ^= (int64_t)(unsigned char)name[0];
    dbus_message_iter_next(&inval);
  }
  return 1;
}

static int64_t g_sink; /* side channel so walk_value work is not elided */

static DBusHandlerResult on_message(DBusConnection *conn, DBusMessage *msg, void *data) {
  (void)conn;
  struct rx_state *st = data;
  if (!dbus_message_is_signal(msg, "org.freedesktop.DBus.Properties", "PropertiesChanged"))
    return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
  if (st->got == 0) st->first_s = now_s();
  if (!decode_properties_changed(msg, &st->checksum, &g_sink)) st->bad++;
  st->got++;
  st->last_s = now_s();
  return DBUS_HANDLER_RESULT_HANDLED;
}

static int cmd_receive(const char *address, long count) {
  DBusConnection *conn = connect_bus(address);
  /* Let the daemon queue as much as it likes to us; we read it all. */
  dbus_connection_set_max_received_size(conn, 1L << 30);
  struct rx_state st = {.want = count};
  if (!dbus_connection_add_filter(conn, on_message, &st, NULL)) die("add_filter", NULL);
  DBusError err;
  dbus_error_init(&err);
  dbus_bus_add_match(conn, MATCH_RULE, &err);
  if (dbus_error_is_set(&err)) die("AddMatch", err.message);

  double c0 = cpu_s();
  printf("READY\n");
  fflush(stdout);
  while (st.got < count) {
    if (!dbus_connection_read_write_dispatch(conn, -1)) {
      fprintf(stderr, "dbus-flood: disconnected after %ld of %ld messages\n", st.got, count);
      return 3;
    }
  }
  double cpu = cpu_s() - c0;
  double wall = st.got > 0 ? st.last_s - st.first_s : 0.0;
  printf("{\"impl\":\"c-libdbus\",\"messages\":%ld,\"wall_s\":%.6f,\"cpu_s\":%.6f,"
         "\"checksum\":%" PRId64 ",\"malformed\":%ld,\"sink\":%" PRId64 "}\n",
         st.got, wall, cpu, st.checksum, st.bad, g_sink);
  fflush(stdout);
  dbus_connection_close(conn);
  dbus_connection_unref(conn);
  return st.bad == 0 ? 0 : 4;
}

/* ------------------------------------------------------------------ main */

static void usage(void) {
  fprintf(stderr,
          "usage: dbus-flood send --address ADDR --count N [--devices D]\n"
          "       dbus-flood receive --address ADDR --count N\n");
  exit(64);
}

static long parse_count(const char *flag, const char *s, long min) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min) {
    fprintf(stderr, "dbus-flood: %s: expected an integer >= %ld, got '%s'\n", flag, min, s);
    exit(64);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  const char *mode = argv[1];
  const char *address = NULL;
  long count = -1, devices = 1000;
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc) usage();
    if (strcmp(argv[i], "--address") == 0) address = argv[++i];
    else if (strcmp(argv[i], "--count") == 0) count = parse_count("--count", argv[++i], 1);
    else if (strcmp(argv[i], "--devices") == 0) devices = parse_count("--devices", argv[++i], 1);
    else usage();
  }
  if (address == NULL || count < 1) usage();
  if (strcmp(mode, "send") == 0) return cmd_send(address, count, devices);
  if (strcmp(mode, "receive") == 0) return cmd_receive(address, count);
  usage();
  return 64;
}
