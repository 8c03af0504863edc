# Sourced at the start of every H200 call: wheels (wgpu-py, gguf) and the Vulkan loader if the image lacks one.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1 VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "from cera_web.gpu.native import NativeDevice as D; d=D.create(); print(d.name, 'subgroup', d.subgroup_size, sorted(d.features))" || exit 1
