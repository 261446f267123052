/* Machine topology through hwloc: where buffers should live on a machine with several NUMA
 * nodes. Without hwloc (a build option) every call reports that nothing was bound. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"

#if HAVE_HWLOC
#include <hwloc.h>
#include <pthread.h>

static hwloc_topology_t topo;
static int topo_state; /* 0 not loaded, 1 loaded, -1 failed */
static pthread_mutex_t topo_lock = PTHREAD_MUTEX_INITIALIZER;

static hwloc_topology_t topology(void)
{
    pthread_mutex_lock(&topo_lock);
    if (topo_state == 0) {
        topo_state = -1;
        if (hwloc_topology_init(&topo) == 0) {
            if (hwloc_topology_load(topo) == 0)
                topo_state = 1;
            else
                hwloc_topology_destroy(topo);
        }
    }
    pthread_mutex_unlock(&topo_lock);
    return topo_state == 1 ? topo : NULL;
}

int blco_topo_bind_area(void *p, size_t bytes, char *what, size_t n)
{
    snprintf(what, n, "not bound");
    hwloc_topology_t t = topology();
    if (!t) {
        snprintf(what, n, "not bound: hwloc could not read the topology");
        return 0;
    }
    int nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    const char *force = getenv("BLCO_NUMA_NODE");
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return -ENOMEM;
    int err = 0, flags = 0;
    if (force && *force) {
        /* A node chosen by the user (also how the tests reach this path on one node). */
        char *end;
        long k = strtol(force, &end, 10);
        hwloc_obj_t node = *end || k < 0 ? NULL : hwloc_get_numanode_obj_by_os_index(t, (unsigned)k);
        if (!node) {
            snprintf(what, n, "not bound: BLCO_NUMA_NODE=%s names no NUMA node; %d present",
                     force, nodes);
            hwloc_bitmap_free(set);
            return 0;
        }
        hwloc_bitmap_copy(set, node->nodeset);
        flags = HWLOC_MEMBIND_BYNODESET;
    } else if (nodes <= 1) {
        snprintf(what, n, "one NUMA node");
        hwloc_bitmap_free(set);
        return 0;
    } else if (hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS) < 0 || hwloc_bitmap_iszero(set) ||
               hwloc_bitmap_isequal(set, hwloc_topology_get_topology_cpuset(t))) {
        /* Threads may run anywhere: nowhere is nearer than interleaving would be. */
        snprintf(what, n, "not bound: %d NUMA nodes, threads free to run on all", nodes);
        hwloc_bitmap_free(set);
        return 0;
    }
    /* With a cpuset (flags 0) hwloc binds to the nodes near those CPUs. */
    if (hwloc_set_area_membind(t, p, bytes, set, HWLOC_MEMBIND_BIND, flags) < 0) {
        snprintf(what, n, "not bound: hwloc refused, %s", strerror(errno));
    } else {
        hwloc_bitmap_t ns = hwloc_bitmap_alloc();
        char *list = NULL;
        if (ns && flags == 0)
            hwloc_cpuset_to_nodeset(t, set, ns);
        if (ns && hwloc_bitmap_list_asprintf(&list, flags ? set : ns) >= 0)
            snprintf(what, n, "bound to NUMA node %s", list);
        else
            snprintf(what, n, "bound");
        free(list);
        hwloc_bitmap_free(ns);
        err = 1;
    }
    hwloc_bitmap_free(set);
    return err;
}

int blco_topo_bind_area_node(void *p, size_t bytes, int node, char *what, size_t n)
{
    hwloc_topology_t t = topology();
    if (!t) {
        snprintf(what, n, "not bound: hwloc could not read the topology");
        return 0;
    }
    int nodes = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    if (nodes <= 1) {
        snprintf(what, n, "one NUMA node");
        return 0;
    }
    hwloc_obj_t o = node < 0 ? NULL : hwloc_get_numanode_obj_by_os_index(t, (unsigned)node);
    if (!o) {
        snprintf(what, n, "not bound: NUMA node %d not found; %d present", node, nodes);
        return 0;
    }
    if (hwloc_set_area_membind(t, p, bytes, o->nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE) < 0) {
        snprintf(what, n, "not bound: hwloc refused node %d, %s", node, strerror(errno));
        return 0;
    }
    snprintf(what, n, "bound to NUMA node %d", node);
    return 1;
}

#else

int blco_topo_bind_area_node(void *p, size_t bytes, int node, char *what, size_t n)
{
    (void)p;
    (void)bytes;
    (void)node;
    snprintf(what, n, "not bound: built without hwloc");
    return 0;
}

int blco_topo_bind_area(void *p, size_t bytes, char *what, size_t n)
{
    (void)p;
    (void)bytes;
    snprintf(what, n, "not bound: built without hwloc");
    return 0;
}

#endif

int blco_topo_pci_numa_node(const char *bus_id)
{
    if (!bus_id || !*bus_id || strlen(bus_id) > 64 || strchr(bus_id, '/'))
        return -1;
    char path[128], id[80];
    size_t i = 0;
    for (; bus_id[i] && i < sizeof id - 1; i++) /* sysfs spells the hex digits in lower case */
        id[i] = (char)(bus_id[i] >= 'A' && bus_id[i] <= 'F' ? bus_id[i] - 'A' + 'a' : bus_id[i]);
    id[i] = 0;
    snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", id);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int node = -1;
    if (fscanf(f, "%d", &node) != 1)
        node = -1;
    fclose(f);
    return node >= 0 ? node : -1;
}
