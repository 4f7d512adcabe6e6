/* The floor for gpuwarden's CPU: a plain C loop that makes the NVML calls gpuwarden makes at
 * its default settings, at the same cadence, and nothing else (docs/performance.md, "Against
 * a C loop"). Run beside the daemon in the same window, its CPU is what the driver costs; the
 * daemon's CPU above it is gpuwarden's own.
 *
 *   gcc -O2 -o nvml-loop scripts/gpu/nvml-loop.c -I/usr/local/cuda/include -l:libnvidia-ml.so.1 -lpthread
 *   ./nvml-loop SECONDS [PHASE [handoff]]
 *
 * PHASE (0 to 1, optional): start the per-GPU threads' one-second grid at that fraction of a
 * wall-clock second, so that loops and daemons run side by side can be kept from polling at
 * the same instant (on a GSP GPU the driver's CPU for a call includes waiting for the GSP's
 * answer, which a second process's calls at the same moment make longer).
 *
 * Tiers, as src/backend/nvml/mod.rs reads them at the defaults (poll.interval 1s,
 * slow_interval 10s, costly every 3 slow, gpm_interval 30s, topology_interval 120s), one
 * thread per GPU woken every second, plus one thread waiting on NVML events (XIDs, double-bit
 * ECC) with a 1 s timeout, as gpuwarden's event thread does.
 *
 * `handoff` (PHASE -1 for none): gpuwarden's shape without its work. A coordinator thread
 * wakes every second, asks each GPU thread for a poll and waits for the answers (at most
 * 500 ms, poll.timeout's default); the GPU threads wait to be asked instead of sleeping. What
 * this costs above the plain loop is the price of the hand-offs on the machine it runs on,
 * which no work gpuwarden saves can go below.
 *
 * Its threads are named (loop-gpu0, loop-events, loop-coordinat) so that their CPU can be read
 * one by one, as the daemon's are.
 */
#define _GNU_SOURCE
#include <nvml.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile int running = 1;

/* The slow tier's one field-values call, in gpuwarden's order (src/backend/nvml/mod.rs,
 * FIELDS). The numbers are written out, in CUDA 12's numbering, because the three clock-event
 * counters moved: drivers from 580.82 on (CUDA 13.0 Update 1) answer them at 269-271 and read
 * 251-253 as power-smoothing fields, which an H100 does not support. gpuwarden's NVML binding
 * (nvml-wrapper) moves the IDs it sends by the driver's version; this loop does the same in
 * `driver_numbering`. Before it did, a loop built against an older nvml.h asked an H100 on
 * driver 580.159 for the unsupported fields: 0.52 ms a call against 1.29 ms for what
 * gpuwarden asks (docs/performance.md, "The loop asked for other fields"). */
static unsigned slow_fields[] = {
    230, /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (R550 and later) */
    142, /* NVML_FI_DEV_REMAPPED_COR */
    143, /* NVML_FI_DEV_REMAPPED_UNC */
    144, /* NVML_FI_DEV_REMAPPED_PENDING */
    145, /* NVML_FI_DEV_REMAPPED_FAILURE */
    74,  /* NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP (= NVML_FI_DEV_PERF_POLICY_POWER) */
    76,  /* NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST (= NVML_FI_DEV_PERF_POLICY_SYNC_BOOST) */
    251, /* NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, CUDA 12's number */
    252, /* NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, CUDA 12's number */
    253, /* NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, CUDA 12's number */
};

/* Drivers from 580.82 on number fields 251-273 as CUDA 13.0 Update 1 does: what was 251-255
 * is 269-273 there (nvml-wrapper's translate_field_id, the rule gpuwarden's calls follow). */
static void driver_numbering(void) {
    char version[96] = "";
    unsigned major = 0, minor = 0;
    if (nvmlSystemGetDriverVersion(version, sizeof version) != NVML_SUCCESS || sscanf(version, "%u.%u", &major, &minor) < 1)
        return;
    if (major < 580 || (major == 580 && minor < 82))
        return;
    for (unsigned i = 0; i < sizeof slow_fields / sizeof *slow_fields; i++)
        if (slow_fields[i] >= 251 && slow_fields[i] <= 255)
            slow_fields[i] += 18;
}

static const unsigned per_link[] = {
    NVML_FI_DEV_NVLINK_GET_STATE,
    NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
    NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
};

static const unsigned gpm_ids[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 20, 21, 60, 61};

struct gpu {
    unsigned index;
    nvmlDevice_t device;
    unsigned links;
    int fans;
    nvmlGpmSample_t gpm[2];
    int gpm_have;
};

static void fields(nvmlDevice_t d, const unsigned *ids, unsigned n, unsigned scope_links) {
    nvmlFieldValue_t values[256];
    unsigned count = 0;
    if (scope_links) {
        for (unsigned link = 0; link < scope_links && count + n <= 256; link++)
            for (unsigned i = 0; i < n; i++) {
                memset(&values[count], 0, sizeof values[count]);
                values[count].fieldId = ids[i];
                values[count].scopeId = link;
                count++;
            }
    } else {
        for (unsigned i = 0; i < n; i++) {
            memset(&values[count], 0, sizeof values[count]);
            values[count].fieldId = ids[i];
            count++;
        }
    }
    nvmlDeviceGetFieldValues(d, (int)count, values);
}

static void every_poll(struct gpu *g) {
    unsigned u;
    nvmlDevice_t d = g->device;
    nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &u);
    unsigned memory_temp = NVML_FI_DEV_MEMORY_TEMP;
    fields(d, &memory_temp, 1, 0);
    unsigned long long reasons;
    nvmlDeviceGetCurrentClocksEventReasons(d, &reasons);
    nvmlDeviceGetPowerUsage(d, &u);
    nvmlDeviceGetEnforcedPowerLimit(d, &u);
    nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &u);
    nvmlDeviceGetClockInfo(d, NVML_CLOCK_MEM, &u);
    nvmlDeviceGetClockInfo(d, NVML_CLOCK_GRAPHICS, &u);
    nvmlUtilization_t util;
    nvmlDeviceGetUtilizationRates(d, &util);
    unsigned period;
    nvmlDeviceGetEncoderUtilization(d, &u, &period);
    nvmlDeviceGetDecoderUtilization(d, &u, &period);
    nvmlMemory_v2_t memory = {.version = nvmlMemory_v2};
    nvmlDeviceGetMemoryInfo_v2(d, &memory);
    nvmlDeviceGetCurrPcieLinkGeneration(d, &u);
    nvmlPstates_t pstate;
    nvmlDeviceGetPerformanceState(d, &pstate);
    if (g->fans > 0)
        nvmlDeviceGetFanSpeed_v2(d, 0, &u);
}

static void slow(struct gpu *g) {
    unsigned u;
    nvmlDevice_t d = g->device;
    nvmlDeviceGetCurrPcieLinkWidth(d, &u);
    nvmlProcessInfo_t processes[64];
    unsigned n = 64;
    nvmlDeviceGetComputeRunningProcesses_v3(d, &n, processes);
    fields(d, slow_fields, sizeof slow_fields / sizeof *slow_fields, 0);
    nvmlEnableState_t current, pending;
    if (nvmlDeviceGetEccMode(d, &current, &pending) == NVML_SUCCESS && current == NVML_FEATURE_ENABLED) {
        unsigned long long count;
        nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &count);
        nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, &count);
        nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count);
        nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &count);
    }
    nvmlDeviceGetPcieReplayCounter(d, &u);
    nvmlGridLicensableFeatures_t licence;
    nvmlDeviceGetGridLicensableFeatures_v4(d, &licence);
    nvmlEnableState_t persistence;
    nvmlDeviceGetPersistenceMode(d, &persistence);
}

static void costly(struct gpu *g) {
    unsigned long long energy;
    nvmlDeviceGetTotalEnergyConsumption(g->device, &energy);
}

static void gpm(struct gpu *g) {
    nvmlGpmSample_t next = g->gpm[g->gpm_have & 1];
    if (nvmlGpmSampleGet(g->device, next) != NVML_SUCCESS)
        return;
    if (g->gpm_have) {
        nvmlGpmMetricsGet_t m;
        memset(&m, 0, sizeof m);
        m.version = NVML_GPM_METRICS_GET_VERSION;
        m.numMetrics = sizeof gpm_ids / sizeof *gpm_ids;
        m.sample1 = g->gpm[(g->gpm_have + 1) & 1];
        m.sample2 = next;
        for (unsigned i = 0; i < m.numMetrics; i++)
            m.metrics[i].metricId = gpm_ids[i];
        nvmlGpmMetricsGet(&m);
    }
    g->gpm_have++;
}

static void topology(struct gpu *g) {
    unsigned crc[12];
    for (unsigned i = 0; i < 12; i++)
        crc[i] = NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0 + i;
    if (g->links) {
        fields(g->device, per_link, sizeof per_link / sizeof *per_link, g->links);
        fields(g->device, crc, g->links < 12 ? g->links : 12, 0);
    }
    nvmlGpuFabricInfoV_t fabric = {.version = nvmlGpuFabricInfo_v2};
    nvmlDeviceGetGpuFabricInfoV(g->device, &fabric);
    unsigned mode, pending;
    nvmlDeviceGetMigMode(g->device, &mode, &pending);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Sleeps until the next wall-clock second plus `phase` (a fraction of a second). */
static void wait_for_phase(double phase) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double into = t.tv_nsec / 1e9;
    double wait = phase - into;
    if (wait <= 0)
        wait += 1;
    struct timespec s = {0, (long)(wait * 1e9)};
    if (wait >= 1) {
        s.tv_sec = 1;
        s.tv_nsec = (long)((wait - 1) * 1e9);
    }
    nanosleep(&s, NULL);
}

static double phase = -1;
static int handoff = 0;
/* The hand-off: the round the coordinator asked for, and how many GPUs answered it. */
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t asked = PTHREAD_COND_INITIALIZER;
static pthread_cond_t answered = PTHREAD_COND_INITIALIZER;
static unsigned long asked_round = 0;
static unsigned answers = 0;

/* Waits until the coordinator asks for round `round`; 0 once the loop stops. */
static int wait_to_be_asked(unsigned long round) {
    pthread_mutex_lock(&round_lock);
    while (running && asked_round <= round)
        pthread_cond_wait(&asked, &round_lock);
    pthread_mutex_unlock(&round_lock);
    return running;
}

/* Signalled after the unlock, so that the woken thread does not wait again for the lock (as
 * gpuwarden's channels wake a receiver without holding a lock). */
static void answer(void) {
    pthread_mutex_lock(&round_lock);
    answers++;
    pthread_mutex_unlock(&round_lock);
    pthread_cond_signal(&answered);
}

static void sleep_until(double next) {
    double wait = next - now();
    if (wait > 0) {
        struct timespec t = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        nanosleep(&t, NULL);
    }
}

static void *coordinate(void *arg) {
    unsigned count = *(unsigned *)arg;
    if (phase >= 0)
        wait_for_phase(phase);
    double start = now();
    for (unsigned long round = 0; running; round++) {
        pthread_mutex_lock(&round_lock);
        answers = 0;
        asked_round = round + 1;
        pthread_mutex_unlock(&round_lock);
        pthread_cond_broadcast(&asked);
        pthread_mutex_lock(&round_lock);
        /* pthread_cond_timedwait reads CLOCK_REALTIME by default. */
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 500000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        while (answers < count)
            if (pthread_cond_timedwait(&answered, &round_lock, &deadline) != 0)
                break;
        pthread_mutex_unlock(&round_lock);
        sleep_until(start + round + 1);
    }
    return NULL;
}

static void *poll_gpu(void *arg) {
    struct gpu *g = arg;
    if (phase >= 0 && !handoff)
        wait_for_phase(phase);
    double start = now();
    for (unsigned long round = 0; running; round++) {
        if (handoff && !wait_to_be_asked(round))
            break;
        every_poll(g);
        if (round % 10 == 0)
            slow(g);
        if (round % 30 == 0)
            costly(g);
        if (round % 30 == 1) /* gpuwarden's first GPM sample comes a second after start */
            gpm(g);
        if (round % 120 == 0)
            topology(g);
        if (handoff)
            answer();
        else
            sleep_until(start + round + 1);
    }
    return NULL;
}

static void *events(void *arg) {
    unsigned count = *(unsigned *)arg;
    nvmlEventSet_t set;
    if (nvmlEventSetCreate(&set) != NVML_SUCCESS)
        return NULL;
    for (unsigned i = 0; i < count; i++) {
        nvmlDevice_t d;
        if (nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS)
            nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError, set);
    }
    while (running) {
        nvmlEventData_t data;
        nvmlEventSetWait_v2(set, &data, 1000);
    }
    nvmlEventSetFree(set);
    return NULL;
}

int main(int argc, char **argv) {
    unsigned seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 300;
    if (argc > 2)
        phase = atof(argv[2]);
    handoff = argc > 3 && strcmp(argv[3], "handoff") == 0;
    if (nvmlInit_v2() != NVML_SUCCESS) {
        fprintf(stderr, "nvml-loop: nvmlInit failed\n");
        return 1;
    }
    driver_numbering();
    unsigned count = 0;
    nvmlDeviceGetCount_v2(&count);
    struct gpu *gpus = calloc(count, sizeof *gpus);
    pthread_t threads[64];
    for (unsigned i = 0; i < count && i < 63; i++) {
        gpus[i].index = i;
        nvmlDeviceGetHandleByIndex_v2(i, &gpus[i].device);
        nvmlFieldValue_t link_count = {.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT};
        if (nvmlDeviceGetFieldValues(gpus[i].device, 1, &link_count) == NVML_SUCCESS && link_count.nvmlReturn == NVML_SUCCESS)
            gpus[i].links = link_count.value.uiVal;
        unsigned fans = 0;
        if (nvmlDeviceGetNumFans(gpus[i].device, &fans) == NVML_SUCCESS)
            gpus[i].fans = (int)fans;
        nvmlGpmSampleAlloc(&gpus[i].gpm[0]);
        nvmlGpmSampleAlloc(&gpus[i].gpm[1]);
        pthread_create(&threads[i], NULL, poll_gpu, &gpus[i]);
        char name[16];
        snprintf(name, sizeof name, "loop-gpu%u", i);
        pthread_setname_np(threads[i], name);
    }
    pthread_t event_thread, coordinator;
    pthread_create(&event_thread, NULL, events, &count);
    pthread_setname_np(event_thread, "loop-events");
    unsigned polled = count < 63 ? count : 63;
    if (handoff) {
        pthread_create(&coordinator, NULL, coordinate, &polled);
        pthread_setname_np(coordinator, "loop-coordinat");
    }
    struct timespec t = {seconds, 0};
    nanosleep(&t, NULL);
    running = 0;
    if (handoff) {
        pthread_join(coordinator, NULL);
        pthread_mutex_lock(&round_lock);
        pthread_cond_broadcast(&asked);
        pthread_mutex_unlock(&round_lock);
    }
    for (unsigned i = 0; i < count && i < 63; i++)
        pthread_join(threads[i], NULL);
    pthread_join(event_thread, NULL);
    nvmlShutdown();
    printf("nvml-loop: %u GPU(s), %u s%s\n", count, seconds, handoff ? ", handing off" : "");
    return 0;
}
