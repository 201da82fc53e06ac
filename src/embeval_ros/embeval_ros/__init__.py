"""embeval_ros: thin ROS 2 nodes over the embeval library."""
