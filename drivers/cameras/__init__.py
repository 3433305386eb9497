"""Camera drivers: V4L2 / OpenCV and Intel RealSense, and the camera node.

- :mod:`drivers.cameras.opencv_camera`: :class:`OpenCVCamera` (device index, /dev/video*,
  video file);
- :mod:`drivers.cameras.realsense`: :class:`RealSenseCamera` (colour + aligned depth,
  intrinsics; live device or recording);
- :mod:`drivers.cameras.rs_software`: write a RealSense recording from a software device;
- :mod:`drivers.cameras.common`: intrinsics, depth frames, the newest-frame grabber;
- :mod:`drivers.cameras.node`: the ROS 2 node (the only module here that imports rclpy).

Both cameras implement :class:`robot_rl.core.protocols.Camera` and deliver frames at the size
the source delivers; crop/resize stays in the env wrappers. Importing this package imports
neither cv2 nor pyrealsense2 nor rclpy.
"""
