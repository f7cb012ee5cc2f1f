// snic-verbs-churn: creates and destroys verbs objects in a loop on the first
// snic device (or the one named by argv[1]) until it is killed. The reclaim test
// kills it with SIGKILL at arbitrary points, mid-creation, and checks that the
// daemon gives everything back. Prints "ready" once the first round is done.
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr std::size_t kMrBytes = 1 << 20;

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "snic-verbs-churn: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

ibv_context* open_device(const char* name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr || n == 0) die("no snic device");
    ibv_device* dev = list[0];
    for (int i = 0; name != nullptr && i < n; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) dev = list[i];
    ibv_context* ctx = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (ctx == nullptr) die("ibv_open_device");
    return ctx;
}

}  // namespace

int main(int argc, char** argv) {
    const char* name = argc > 1 ? argv[1] : nullptr;
    bool announced = false;
    for (unsigned round = 0;; ++round) {
        ibv_context* ctx = open_device(name);
        ibv_pd* pd = ibv_alloc_pd(ctx);
        if (pd == nullptr) die("ibv_alloc_pd");
        void* buf =
            mmap(nullptr, kMrBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) die("mmap");
        std::memset(buf, static_cast<int>(round), kMrBytes);
        ibv_mr* mr =
            ibv_reg_mr(pd, buf, kMrBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (mr == nullptr) die("ibv_reg_mr");
        ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
        if (ch == nullptr) die("ibv_create_comp_channel");
        ibv_cq* cq = ibv_create_cq(ctx, 256, nullptr, ch, 0);
        if (cq == nullptr) die("ibv_create_cq");
        ibv_srq_init_attr sattr{};
        sattr.attr.max_wr = 128;
        sattr.attr.max_sge = 1;
        ibv_srq* srq = ibv_create_srq(pd, &sattr);
        if (srq == nullptr) die("ibv_create_srq");
        ibv_qp_init_attr qattr{};
        qattr.send_cq = cq;
        qattr.recv_cq = cq;
        qattr.qp_type = IBV_QPT_RC;
        qattr.cap.max_send_wr = 64;
        qattr.cap.max_recv_wr = 64;
        qattr.cap.max_send_sge = 1;
        qattr.cap.max_recv_sge = 1;
        ibv_qp* qp = ibv_create_qp(pd, &qattr);
        if (qp == nullptr) die("ibv_create_qp");
        ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
        if (mw == nullptr) die("ibv_alloc_mw");
        if (!announced) {
            std::printf("ready\n");
            std::fflush(stdout);
            announced = true;
        }
        // Every other round leaves its objects for the exit (or the kill) to reclaim.
        if (round % 2 == 0) {
            ibv_dealloc_mw(mw);
            ibv_destroy_qp(qp);
            ibv_destroy_srq(srq);
            ibv_destroy_cq(cq);
            ibv_destroy_comp_channel(ch);
            ibv_dereg_mr(mr);
            ibv_dealloc_pd(pd);
            ibv_close_device(ctx);
            munmap(buf, kMrBytes);
        }
        if (round > 64 && round % 2 == 1) {  // bound the objects left behind
            std::printf("done\n");
            return 0;
        }
    }
}
