# fqcore: TF-exact fake quantization on the CPU
