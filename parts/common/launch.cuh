// One way to start a kernel, wherever it goes: popkit::launch(to, kernel, grid, block, smem, args...)
// launches now on the default queue when `to` is null (what <<<grid, block, smem>>> does), and otherwise
// records the launch in a CUDA graph through the Launcher: as a new kernel node after the nodes named by
// Launcher::after (build mode), or as new parameters for the node the same launch added before (rebind
// mode: the graph's launch sequence walked again with other pointers, node i for launch i).
// Why: a launch function (a kernel's grid, block and template choice) is written once and serves both the
// one-call loops and a graph whose independent nodes run side by side on one device, with no queue to name.
// Kernels with compile-time __cluster_dims__ should keep their clusters as nodes: the runtime documents the
// cluster shape as a required attribute of the function (cudaFuncAttributeRequiredClusterWidth, fixed at
// compile time, checked at launch), not of the launch. Seen on the H200 (run 33d): a graph with cluster
// kernels among its nodes gave bitwise the direct launches' outputs on every benchmark case
// (scripts/same_outputs.py; a lost cluster would fault in cluster.sync or change the outputs).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

namespace popkit {

class Launcher {
  public:
    // Build mode: each launch adds a kernel node to `graph` (owned by the caller).
    void build(cudaGraph_t graph) {
        graph_ = graph, exec_ = nullptr;
        nodes_.clear(), deps_.clear();
    }
    // Rebind mode: the launches, in the order they were built, set the parameters of exec's nodes.
    void rebind(cudaGraphExec_t exec) { exec_ = exec, next_ = 0; }
    // The nodes the next launches wait for (null entries skipped: a node that was not needed).
    void after(std::initializer_list<cudaGraphNode_t> nodes) {
        deps_.clear();
        for (cudaGraphNode_t node : nodes)
            if (node != nullptr) deps_.push_back(node);
    }
    // The node of the latest launch.
    cudaGraphNode_t last() const { return exec_ != nullptr ? nodes_[next_ - 1] : nodes_.back(); }
    bool rebound_all() const { return next_ == nodes_.size(); }

    cudaError_t add(const void* kernel, dim3 grid, dim3 block, unsigned smem, void** args) {
        cudaKernelNodeParams params = {};
        params.func = const_cast<void*>(kernel);
        params.gridDim = grid, params.blockDim = block, params.sharedMemBytes = smem, params.kernelParams = args;
        if (exec_ != nullptr) {
            if (next_ == nodes_.size()) return cudaErrorInvalidValue;    // more launches than when built
            return cudaGraphExecKernelNodeSetParams(exec_, nodes_[next_++], &params);
        }
        cudaGraphNode_t node = nullptr;
        const cudaError_t err = cudaGraphAddKernelNode(&node, graph_, deps_.data(), deps_.size(), &params);
        if (err == cudaSuccess) nodes_.push_back(node);
        return err;
    }

  private:
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    std::vector<cudaGraphNode_t> nodes_;    // every node built, in launch order
    std::vector<cudaGraphNode_t> deps_;
    std::size_t next_ = 0;                  // rebind: the node the next launch sets
};

template <typename Kernel, typename Values, std::size_t... I>
cudaError_t launch_values(Launcher* to, Kernel kernel, dim3 grid, dim3 block, unsigned smem, Values& values,
                          std::index_sequence<I...>) {
    void* args[] = {&std::get<I>(values)...};
    if (to != nullptr) return to->add(reinterpret_cast<const void*>(kernel), grid, block, smem, args);
    const cudaError_t err = cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, smem);
    const cudaError_t last = cudaGetLastError();
    return err != cudaSuccess ? err : last;
}

// kernel(args...) on grid x block threads with smem bytes of dynamic shared memory: now (to == null) or
// into to's graph. Each argument is converted to the kernel's parameter type first, as <<<>>> does.
template <typename... Params, typename... Args>
cudaError_t launch(Launcher* to, void (*kernel)(Params...), dim3 grid, dim3 block, unsigned smem, Args... args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "one argument a kernel parameter");
    std::tuple<Params...> values(args...);
    return launch_values(to, kernel, grid, block, smem, values, std::index_sequence_for<Params...>{});
}

}  // namespace popkit
