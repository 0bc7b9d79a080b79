"""Registers the baseline methods and architectures (lazy targets: nothing heavy is imported)."""

from ssilbench.api import hookimpl


@hookimpl
def ssilbench_register_methods(registry):
    registry.add("bc", "ssilbench_baselines.bc:BC", "Behaviour cloning on D_L.")
    registry.add(
        "idm_labeling",
        "ssilbench_baselines.idm_labeling:IDMLabeling",
        "IDM trained on D_L labels D_U; a policy is cloned from the labeled D_U.",
    )
    registry.add(
        "vm_idm",
        "ssilbench_baselines.vm_idm:VMIDM",
        "IDM trained on D_L applied to a video model's next state (ground truth or learned).",
    )


@hookimpl
def ssilbench_register_architectures(registry):
    registry.add("lc", "ssilbench_baselines.architectures:LinearClassifier", "Linear classifier.")
    registry.add("mlp5", "ssilbench_baselines.architectures:MLP5", "5 hidden layers of 100, ReLU.")
    registry.add("cnn1", "ssilbench_baselines.architectures:CNN1", "One 3x3 conv, global max-pool.")
    registry.add(
        "cnn5", "ssilbench_baselines.architectures:CNN5", "3 conv-ReLU-maxpool blocks, 2 FC 128."
    )
    registry.add(
        "impala",
        "ssilbench_baselines.impala:Impala",
        "IMPALA-CNN x4 + linear 128 + decoder (192,128,64) (the paper's code).",
    )
    registry.add(
        "impala_mlp",
        "ssilbench_baselines.impala:ImpalaMLP",
        "IMPALA-CNN x4 + action MLP (128,128) (the paper's text).",
    )
    registry.add(
        "impala_small", "ssilbench_baselines.impala:ImpalaSmall", "IMPALA-CNN x1 (CPU-sized)."
    )
    registry.add("impala_bf16", "ssilbench_baselines.impala:ImpalaBF16", "impala in bf16 on CUDA.")
    registry.add(
        "continuous",
        "ssilbench_baselines.continuous:ContinuousHead",
        "Continuous actions: MLP or small CNN, tanh outputs in [-1, 1].",
    )
